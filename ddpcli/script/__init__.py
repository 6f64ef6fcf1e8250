"""Reading a user's script, shared by `ddpcli init` and `ddpcli port`."""
