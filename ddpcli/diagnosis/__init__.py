"""What ddpcli concludes about runs: the findings of one run (run.json's `findings`: codes are a contract,
docs/contracts.md), their causes and advice, and the notes compare prints about runs side by side. Pure: it
reads the run directory's format (ddpcli.rundir) and the experiment's plan, and writes words; nothing below it
produces a finding or a note.
"""
