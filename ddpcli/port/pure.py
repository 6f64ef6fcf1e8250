"""What a call may do and still be talk, not training: formatting, reading a number. rank 0 alone may make such
calls (the arguments of a print it guards; a function of the program that only prints)."""

PURE_BUILTINS = frozenset({
    "len", "str", "repr", "int", "float", "round", "format", "abs", "min", "max", "sum", "sorted", "list", "tuple",
    "dict", "set", "enumerate", "zip", "range", "isinstance", "type", "bool", "divmod", "pow", "any", "all", "id",
})  # fmt: skip
PURE_METHODS = frozenset({
    "item", "tolist", "format", "join", "mean", "sum", "std", "var", "max", "min", "argmax", "argmin", "size",
    "numel", "cpu", "detach", "numpy", "float", "double", "int", "long", "get", "keys", "values", "items", "upper",
    "lower", "strip", "rstrip", "lstrip", "split", "replace", "count", "startswith", "endswith", "total_seconds",
    "strftime", "isoformat", "eq", "ne", "norm", "abs", "sqrt", "exp", "log", "squeeze", "view", "reshape", "dim",
    "state_dict", "parameters", "named_parameters", "buffers", "named_buffers", "getvalue", "read_text",
})  # fmt: skip
PURE_MODULES = ("math.", "time.", "datetime.", "numpy.", "statistics.", "os.path.", "json.dumps", "torch.")
