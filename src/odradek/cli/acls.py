"""`odradek acls add|list|remove`: ACLs with kafka-acls.sh's vocabulary, over the admin client.

    odradek acls add --allow-principal User:alice --operation Read --topic orders
    odradek acls add --allow-principal User:app --producer --topic out --resource-pattern-type prefixed
    odradek acls list [--topic orders --resource-pattern-type match] [--principal User:alice]
    odradek acls remove --topic orders [--allow-principal User:alice --operation Read]

Resources: --topic, --group, --transactional-id (repeatable) and --cluster; principals
--allow-principal / --deny-principal with --allow-host / --deny-host (default every host);
--operation (repeatable, Kafka's names in any case: Read, IDEMPOTENT_WRITE, describe-configs;
default All); --producer and --consumer add what kafka-acls adds for them. The pattern type is
literal unless --resource-pattern-type says prefixed (add), or any / match (list, remove).
`list` and `remove` print the ACLs as kafka-acls does. `--command-config` gives the client
settings for a secured listener.
"""

from __future__ import annotations

import click

from odradek.cli.client_config import admin_client, command_config_option
from odradek.cli.topics import bootstrap_option, run
from odradek.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType, from_camel

CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"


def _resource_options(f):
    for opt in reversed(
        [
            click.option("--topic", "topics", multiple=True, help="A topic (repeatable; * is every topic)."),
            click.option("--group", "groups", multiple=True, help="A consumer group (repeatable)."),
            click.option("--transactional-id", "txn_ids", multiple=True, help="A transactional id (repeatable)."),
            click.option("--cluster", "cluster", is_flag=True, help="The cluster resource."),
            click.option(
                "--resource-pattern-type",
                "pattern_type",
                default="literal",
                show_default=True,
                type=click.Choice(["literal", "prefixed", "any", "match"], case_sensitive=False),
                help="literal or prefixed; any or match select patterns (list, remove).",
            ),
        ]
    ):
        f = opt(f)
    return f


def _principal_options(f):
    for opt in reversed(
        [
            click.option("--allow-principal", "allow", multiple=True, help="Type:name allowed (repeatable)."),
            click.option("--deny-principal", "deny", multiple=True, help="Type:name denied (repeatable)."),
            click.option("--allow-host", "allow_hosts", multiple=True, help="Host allowed (default *)."),
            click.option("--deny-host", "deny_hosts", multiple=True, help="Host denied (default *)."),
            click.option("--operation", "operations", multiple=True, help="Read, Write, Describe, ... (repeatable)."),
        ]
    ):
        f = opt(f)
    return f


def _resources(topics, groups, txn_ids, cluster) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics]
    out += [(ResourceType.GROUP, g) for g in groups]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _operation(name: str) -> AclOperation:
    try:
        return AclOperation(from_camel(AclOperation, name))
    except ValueError:
        choices = ", ".join(
            o.name.title().replace("_", "") for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)
        )
        raise click.BadParameter(f"unknown operation {name!r}; one of {choices}", param_hint="--operation") from None


def _entries(allow, deny, allow_hosts, deny_hosts) -> list[tuple[str, str, AclPermissionType]]:
    out = [(p, h, AclPermissionType.ALLOW) for p in allow for h in (allow_hosts or (WILDCARD_HOST,))]
    out += [(p, h, AclPermissionType.DENY) for p in deny for h in (deny_hosts or (WILDCARD_HOST,))]
    return out


def _role_operations(
    resources: list[tuple[ResourceType, str]], producer: bool, consumer: bool, idempotent: bool
) -> list[tuple[ResourceType, str, AclOperation]]:
    """kafka-acls' --producer (Write, Describe, Create on topics; Write, Describe on transactional
    ids; IdempotentWrite on the cluster with --idempotent) and --consumer (Read, Describe on
    topics, Read on groups)."""
    out: list[tuple[ResourceType, str, AclOperation]] = []
    for rt, name in resources:
        if producer and rt == ResourceType.TOPIC:
            out += [(rt, name, op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)]
        if producer and rt == ResourceType.TRANSACTIONAL_ID:
            out += [(rt, name, op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        if consumer and rt == ResourceType.TOPIC:
            out += [(rt, name, op) for op in (AclOperation.READ, AclOperation.DESCRIBE)]
        if consumer and rt == ResourceType.GROUP:
            out.append((rt, name, AclOperation.READ))
    if producer and idempotent:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
    return out


def format_acls(bindings) -> list[str]:
    """kafka-acls' listing: each resource pattern, then its entries."""
    by: dict[tuple, list] = {}
    for b in bindings:
        by.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    lines = []
    for (rt, name, pt), bs in sorted(by.items()):
        lines.append(
            f"Current ACLs for resource `ResourcePattern(resourceType={rt.name}, name={name}, patternType={pt.name})`: "
        )
        for b in sorted(bs, key=lambda b: (b.principal, b.host, b.operation, b.permission)):
            lines.append(
                f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                f"permissionType={b.permission.name})"
            )
        lines.append("")
    return lines


@click.group()
def acls() -> None:
    """Add, list and remove ACLs (kafka-acls.sh's options)."""


@acls.command("add")
@bootstrap_option
@command_config_option
@_resource_options
@_principal_options
@click.option("--producer", is_flag=True, help="The ACLs a producer needs on the topics (and transactional ids).")
@click.option("--consumer", is_flag=True, help="The ACLs a consumer needs on the topics and groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster.")
def add_cmd(
    bootstrap,
    command_config,
    topics,
    groups,
    txn_ids,
    cluster,
    pattern_type,
    allow,
    deny,
    allow_hosts,
    deny_hosts,
    operations,
    producer,
    consumer,
    idempotent,
):
    """Add ACLs: every principal x host x operation on every resource named."""
    from odradek.client.aio import AclBinding

    pt = PatternType(from_camel(PatternType, pattern_type))
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.BadParameter("adding takes literal or prefixed", param_hint="--resource-pattern-type")
    resources = _resources(topics, groups, txn_ids, cluster)
    entries = _entries(allow, deny, allow_hosts, deny_hosts)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    if producer or consumer:
        if operations:
            raise click.UsageError("--operation cannot be combined with --producer or --consumer")
        triples = _role_operations(resources, producer, consumer, idempotent)
    else:
        ops = [_operation(o) for o in operations] or [AclOperation.ALL]
        triples = [(rt, name, op) for rt, name in resources for op in ops]
    bindings = []
    for rt, name, op in triples:
        rpt = PatternType.LITERAL if rt == ResourceType.CLUSTER else pt
        for principal, host, perm in entries:
            bindings.append(AclBinding(rt, name, rpt, principal, host, op, perm))

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            await a.create_acls(bindings)

    run(go())
    click.echo(f"Adding ACLs: {len(bindings)}")
    for line in format_acls(bindings):
        click.echo(line)


def _filters(resources, pattern_type, entries, operations, principal) -> list:
    from odradek.client.aio import AclBindingFilter

    pt = PatternType(from_camel(PatternType, pattern_type))
    ops = [_operation(o) for o in operations] or [AclOperation.ANY]
    who = [(p, h, perm) for p, h, perm in entries] or [(principal, None, AclPermissionType.ANY)]
    targets = resources or [(ResourceType.ANY, None)]
    return [
        AclBindingFilter(rt, name, PatternType.ANY if name is None else pt, p, h, op, perm)
        for rt, name in targets
        for op in ops
        for p, h, perm in who
    ]


@acls.command("list")
@bootstrap_option
@command_config_option
@_resource_options
@click.option("--principal", default=None, help="Only this principal's ACLs (Type:name).")
def list_cmd(bootstrap, command_config, topics, groups, txn_ids, cluster, pattern_type, principal):
    """List ACLs: all, or those of the resources (and principal) named."""
    filters = _filters(_resources(topics, groups, txn_ids, cluster), pattern_type, [], (), principal)

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            found = []
            for f in filters:
                found += [b for b in await a.describe_acls(f) if b not in found]
            return found

    for line in format_acls(run(go())):
        click.echo(line)


@acls.command("remove")
@bootstrap_option
@command_config_option
@_resource_options
@_principal_options
@click.option("--force", is_flag=True, help="Accepted for kafka-acls' sake: remove never asks.")
def remove_cmd(
    bootstrap,
    command_config,
    topics,
    groups,
    txn_ids,
    cluster,
    pattern_type,
    allow,
    deny,
    allow_hosts,
    deny_hosts,
    operations,
    force,
):
    """Remove the ACLs of the resources named (only the principals' and operations' given)."""
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(allow, deny, allow_hosts, deny_hosts)
    filters = _filters(resources, pattern_type, entries, operations, None)

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            return await a.delete_acls(filters)

    removed = run(go())
    click.echo(f"Removed ACLs: {len(removed)}")
    for line in format_acls(removed):
        click.echo(line)
