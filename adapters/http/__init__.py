"""`signoff serve`: the reviewer and auditor HTTP service and its web inbox (the `serve` extra).

Reviewers and auditors authenticate (API tokens, OIDC bearer tokens); the service holds the
reviewer side's authority (it signs decisions) and runs on a login that has `signoff_reviewer`.
"""
