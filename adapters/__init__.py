"""What connects Signoff's core to the outside world: the CLI and agent framework adapters."""

__all__: list[str] = []
