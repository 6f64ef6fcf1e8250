"""Rich renderings, one module per command: plan, launch (the summary table), compare (tables, CSV, plot).

Renderers only format: they take the data they show (no file reading, no host module) and return
tables or text. This package's __init__ imports nothing, so `ddpcli plan` loads the plan renderer alone.
Shared: format (numbers and paths), layout (tables that fit a width without cutting a value, bullet lists).
"""
