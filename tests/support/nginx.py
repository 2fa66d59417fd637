"""Debian's nginx as a real intermediary in front of an upstream, buffering or not.

With `proxy_buffering on`, nginx passes a chunked upstream stream on event by event, but
holds a close-delimited body (no chunked framing, no Content-Length: HTTP/1.0 style) and
releases it in buffer-sized bursts — the buffering intermediary that ITL and TPOT must not
be blamed on the server for. uvicorn always frames a stream as chunked, so for the
close-delimited case the same nginx first re-serves the upstream without chunked framing on
an inner port (`chunked_transfer_encoding off`), and the outer, buffering server proxies that.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from loadgen.stack.processes import free_port, running

NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")  # not on every PATH

CONFIG = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{inner};
        chunked_transfer_encoding off;
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_buffering off;
        }}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {source};
            proxy_http_version 1.1;
            proxy_buffering {buffering};
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(
    tmp: Path, upstream: str, *, buffering: bool, close_delimited: bool = False
) -> Iterator[str]:
    """nginx on a free loopback port in front of upstream (a base URL); yields its base URL.

    close_delimited: the buffering server sees the upstream's body without chunked framing.
    """
    if NGINX is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx)")
    tmp.mkdir(parents=True, exist_ok=True)
    port, inner = free_port(), free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(
        CONFIG.format(
            tmp=tmp,
            port=port,
            inner=inner,
            upstream=upstream,
            source=f"http://127.0.0.1:{inner}" if close_delimited else upstream,
            buffering="on" if buffering else "off",
        )
    )
    args = [NGINX, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)]
    url = f"http://127.0.0.1:{port}"
    with running(args, url + "/health", tmp / "nginx.log"):
        yield url
