"""The worker side: code that runs inside every training process torchrun starts, and imports torch.

runtime: the helper a script may import. observer: what `ddpcli launch` installs around any script to record what
it really did. Both build on the pure modules (the run directory's layout, JSON values) and never on the CLI or
host modules.
"""
