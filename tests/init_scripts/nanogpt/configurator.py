"""The pattern of nanoGPT's configurator (not its code): exec'd by train.py, it overrides the script's globals
from plain arguments (config files, themselves exec'd) and `--key=value` arguments (literal_eval'd, the type must
match the global's). Anything else, `--help` included, fails an assert: such a script cannot be asked for help."""

import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if "=" not in arg:
        assert not arg.startswith("--"), f"not a config file or --key=value: {arg}"
        with open(arg) as config_file:
            exec(config_file.read())
    else:
        assert arg.startswith("--")
        key, val = arg.split("=", 1)
        key = key[2:]
        assert key in globals(), f"unknown config key: {key}"
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) == type(globals()[key]), f"{key}: {type(attempt)} is not {type(globals()[key])}"  # noqa: E721
        globals()[key] = attempt
