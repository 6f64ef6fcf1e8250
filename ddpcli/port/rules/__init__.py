"""One rule a module: each reads the facts, asks for edits and records its changes (and what it cannot port).

RULES is the order they run in: the wrap rule first (the others read which models it wrapped), the header last
(it defines only the helpers the others used).
"""
