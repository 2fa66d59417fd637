"""The engine: drives a run's load (blocks, schedules, workloads, targets) and measures each
request on the client side. It writes records; analysis/ judges them.

- `runner.py` blocks of closed- or open-loop requests, interleaved across targets
- `conversations.py` conversations under way: a --turns history, a replayed call graph
- `server_window.py` the servers' metrics scraped around each measured window
- `tasks.py` a block's coroutines run until it is over, the rest cancelled
- `budget.py` a block's budget: its window, warm-up and end
- `window.py` which part of a load a request belongs to
- `schedule.py` the load, its arrival schedules and the block plan (pure)
- `client.py` the streaming client: one request in, one Record out
- `measurement.py` one request's measurement, whatever client streams it
- `workload.py` what each request asks for: prompts and lengths
- `dataset.py` prompts from a file, each record's shape checked
- `sizing.py` synthetic prompts calibrated against a tokenizer
- `targets.py` where load goes
- `virtual.py` a virtual: target's load on the simulator's clock, its predictions as records
- `virtual_requests.py` the workload as the twin's requests: lengths, turns, sharing, call graphs
- `virtual_stream.py` a virtual request's stream: its content events, their gaps on the record
- `virtual_settle.py` a capacity probe's settling warm-up, read off the twin's timings
- `flags.py` the flags both engines take, and loadgen's answer and cost flags, each defined once
- `progress.py` the live progress line
- `interrupt.py` Ctrl-C and SIGTERM during a run
- `probes.py` eval items and consistency prompts mixed into the load, and judged
"""
