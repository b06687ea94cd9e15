"""The authorizer's settings (Kafka's ServerConfigs.AUTHORIZER_CLASS_NAME_CONFIG and the
StandardAuthorizer's own): broker/security/authorizer.py."""

from __future__ import annotations

from odradek.broker.settings.setting import Setting, one_of

# Kafka's authorizers, both served by odradek's (broker/security/authorizer.py); "" is none.
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)

AUTHORIZER: tuple[Setting, ...] = (
    Setting(
        "authorizer.class.name",
        "string",
        "",
        "The authorizer: empty for none (every request allowed, the ACL APIs answer SECURITY_DISABLED), "
        "or Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer or "
        "kafka.security.authorizer.AclAuthorizer, both served with StandardAuthorizer's semantics. "
        "Any other class is refused.",
        validate=one_of("", *AUTHORIZER_CLASS_NAMES),
    ),
    Setting(
        "super.users",
        "string",
        "",
        "Principals allowed everything whatever the ACLs say, separated by semicolons (User:admin;User:ops).",
    ),
    Setting(
        "allow.everyone.if.no.acl.found",
        "bool",
        False,
        "Whether a resource with no ACL at all is open to everyone (true) or to super users only (false).",
    ),
)
