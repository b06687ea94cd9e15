"""Replication's broker side, split as Kafka splits it.

- `fetcher_state.py`: the follower's decisions, sans-IO (Kafka's AbstractFetcherThread): per
  partition its fetch state, the next Fetch request's partitions, and for each partition of
  a response what to do: append, truncate, ask the leader's offsets, back off, park.
- `leader_endpoint.py`: the I/O to the leader (Kafka's RemoteLeaderEndPoint): Fetch and
  ListOffsets over a connection from a provider.
- `fetcher.py`: the asyncio loop gluing the two, and the manager that assigns followed
  partitions to fetchers by leader and index (Kafka's ReplicaFetcherThread/-Manager).
- `alter_partition.py`: the leader's ISR changes sent to the controller (AlterPartition).
- `channel.py`: where their connections come from (`ConnectionProvider`).

The leader's side of a fetch (fencing, divergence, the follower's position, ISR expansion)
is `broker/partition.py`'s `Partition.fetch_records`.
"""
