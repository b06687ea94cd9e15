"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546, KIP-599) as Kafka does them.

`entities`: the quota keys and entities, Kafka's precedence of the eight user/client-id
combinations, DescribeClientQuotas' filter and AlterClientQuotas' checks (ZkAdminManager);
`rate`: Kafka's windowed Rate and the throttle time it gives (QuotaUtils.throttleTime);
`manager`: one ClientQuotaManager per quota type, shared sensors per metric tags, as Kafka's.
"""
