"""A failover harness: Signoff on a three-node Patroni cluster, its primary lost under load.

`python -m bench.failover --mode sync` (synchronous replication: every guarantee must hold) or
`--mode async` (asynchronous: a failover that loses committed transactions, and what Signoff
detects). See docs/pages/operations/failover.md.
"""
