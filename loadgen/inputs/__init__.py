"""What a run takes in, alike in every layer: JSON-lines files and flags' numbers, read and
checked, and the text its prompts are made of. Leaves: they import nothing of loadgen outside
this folder (the simulator reads JSON lines with them too).

- `jsonl.py` JSON-lines input read alike everywhere
- `bounds.py` the numeric flags' parsers: finite and in range
- `prompt_text.py` the text synthetic and replayed prompts are made of, and a Prompt
"""
