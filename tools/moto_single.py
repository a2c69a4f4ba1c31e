"""Serve moto's DynamoDB-compatible API single-threaded, for the store conformance tests.

`moto_server` runs werkzeug with threaded=True, and moto has no lock around a conditional
write's check and its write: under 50 racing conditional PutItems two writers sometimes both
win. One request at a time makes every conditional write atomic, like DynamoDB's.

Usage: python tools/moto_single.py HOST PORT [PORT_FILE]
PORT may be 0 (any free port); the bound port is written to PORT_FILE once the socket listens.

It imports moto internals, so it is pinned: scripts/dynamodb-servers.sh installs MOTO_VERSION.
"""

import logging
import os
import sys

MOTO_VERSION = "5.2.1"


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    port_file = sys.argv[3] if len(sys.argv) > 3 else None

    import moto
    from moto.moto_server import threaded_moto_server
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    if moto.__version__ != MOTO_VERSION:
        print(f"moto_single.py: expected moto {MOTO_VERSION}, found {moto.__version__}", file=sys.stderr)

    # Request lines on stderr would cost more than the requests themselves.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    app = DomainDispatcherApplication(create_backend_app)
    kwargs = {}
    # Newer moto (5.2.5+) ships its own request handler; use it where it exists.
    handler = getattr(threaded_moto_server, "MotoRequestHandler", None)
    if handler is not None:
        kwargs["request_handler"] = handler
    server = make_server(host, port, app, threaded=False, **kwargs)
    bound = server.server_address[1]
    os.environ.setdefault("MOTO_PORT", str(bound))
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{bound}\n")
        os.replace(tmp, port_file)
    print(f"moto {moto.__version__} single-threaded on http://{host}:{bound}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
