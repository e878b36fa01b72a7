"""Models: resolve and load them (builtin, local directory, hub id, peft adapter: `hub`), the packed
batch (`batch`) and its forward pass (`forward`, `attention`), and the precision decision (`precision`).
"""
