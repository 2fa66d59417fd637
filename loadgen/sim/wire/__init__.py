"""vLLM's interface, as the simulator plays it: the OpenAI-compatible routes, the bodies and
errors vLLM writes, and the faults a test can inject.

- `app.py` vLLM's OpenAI-compatible routes over a simulated engine
- `serving.py` serving flags that change what an answer says
- `auth.py` vLLM's --api-key
- `requests.py` a request read as vLLM reads it: parsing and admission
- `validation.py` field validation as vLLM's request models do it
- `responses.py` the bodies and stream chunks vLLM writes
- `errors.py` vLLM's error bodies
- `middleware.py` where scripts and faults are played
- `script.py` scripted mode: a script per request
- `faults.py` failure injection
- `connection.py` the connection under a request, for the faults that break it
"""
