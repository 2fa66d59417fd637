"""The files a fit reads, each turned into streams of requests: the proxy's log and loadgen's
runs, and other benchmark tools' files (AIPerf, GuideLLM, inference-perf, vLLM's bench
serve). The format is told from the content, not the file's name. Pure parsing but for
reading the file (docs/reference/fit-sources.md).

- `stream.py` a request as captured, and a stream of them on one clock
- `fields.py` a number read from a record, checked, or one line naming where it is wrong
- `ours.py` the proxy's request log and loadgen's requests.jsonl
- `aiperf.py` AIPerf's profile_export.jsonl
- `guidellm.py` GuideLLM's benchmarks.json
- `inference_perf.py` inference-perf's reports
- `vllm_bench.py` vLLM's `bench serve --save-result --save-detailed` JSON
- `rebuilt.py` arrivals rebuilt from a run's recorded settings
- `detect.py` which format a file is, from its content
"""
