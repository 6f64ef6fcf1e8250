"""`ddpcli port`: a single-device training script rewritten as a data-parallel one, with libcst.

libcst keeps the user's formatting and comments, so the output differs from the script only where a rule changed
it and the diff reads like a careful human's edit. The engine (engine.py) reads the script once (facts.py), asks
each rule (rules/, one concern a module) for its edits and its change records, and applies them in one pass
(edits.py). Refusals (already data-parallel, a self-launching framework, nothing trains, not Python) come first
(refusals.py). Pure: no torch here; the port's output never imports ddpcli.
"""
