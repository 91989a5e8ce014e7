#!/usr/bin/env python3
"""The S3-compatible server the remote tests and the benchmark talk to over HTTP.

moto's S3 backend (PyPI `moto[server]`), threaded, with one addition: moto checks
If-Match / If-None-Match and then stores the object in two steps, so two conditional
writes of one key on two threads could both pass the check. Here conditional requests
take a lock, so between a check and its store no other conditional write can land:
conditional writes are atomic, as on S3 itself (refs move only by conditional writes).
Usage: s3-server.py [--ignore-conditions] PORT [BUCKET...] (the buckets are created at
start); it prints "ready" once it accepts connections, and stops on SIGTERM.
With --ignore-conditions it drops If-Match / If-None-Match from every request instead,
as some self-hosted stores do: the tests' store that must fail avfs's probe.
"""
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


def serialize_conditional(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if "HTTP_IF_MATCH" in environ or "HTTP_IF_NONE_MATCH" in environ:
            with lock:
                return app(environ, start_response)
        return app(environ, start_response)

    return wrapped


def ignore_conditional(app):
    def wrapped(environ, start_response):
        environ.pop("HTTP_IF_MATCH", None)
        environ.pop("HTTP_IF_NONE_MATCH", None)
        return app(environ, start_response)

    return wrapped


def main():
    args = sys.argv[1:]
    ignore = args[:1] == ["--ignore-conditions"]
    if ignore:
        args = args[1:]
    port = int(args[0])
    buckets = args[1:]
    backend = DomainDispatcherApplication(create_backend_app)
    app = ignore_conditional(backend) if ignore else serialize_conditional(backend)
    server = make_server(
        "127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler
    )
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    if buckets:
        # Through the server itself, so the buckets live in the backend it serves.
        import http.client

        t = threading.Thread(target=server.serve_forever, daemon=True)
        t.start()
        for b in buckets:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("PUT", f"/{b}")
            r = c.getresponse()
            r.read()
            if r.status not in (200, 409):
                sys.exit(f"cannot create bucket {b}: HTTP {r.status}")
        print("ready", flush=True)
        t.join()
    else:
        print("ready", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
