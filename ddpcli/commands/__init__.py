"""One module per command; each keeps its body short: parse, call the pure logic, render."""
