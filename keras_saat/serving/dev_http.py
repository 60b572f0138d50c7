"""The development server's HTTP side: a request handler with a whole-request deadline,
and a threading server that serves at most `max_connections` connections at once."""

import contextlib
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from keras_saat.serving.request_checks import (
    MAX_BODY_BYTES,
    BadRequest,
    Busy,
    Forbidden,
    NotFound,
    Page,
)


def http_handler(server):
    """The request handler class of `server` (a DevServer): one request at a time per
    connection, read whole within `server.read_timeout`, answered as TF Serving answers."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = server.read_timeout  # each read on the socket, idle keep-alive included

        def handle_one_request(self):
            # The whole request must arrive within read_timeout: a client trickling
            # bytes resets the per-read timeout but not this deadline.
            self._deadline = threading.Timer(server.read_timeout, self._cut)
            self._deadline.daemon = True
            self._deadline.start()
            try:
                super().handle_one_request()
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True  # the client went away or was cut off
            finally:
                self._deadline.cancel()

        def _cut(self):
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _answer(self, status, payload):
            kind = "application/json"
            if isinstance(payload, Page):
                data, kind = payload.encode("utf-8"), "text/html; charset=utf-8"
            else:
                data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(data)
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True  # the client hung up: nobody to answer

        def _length(self):
            """The body's declared length; a bad one closes the connection (its body
            cannot be skipped) and answers 400."""
            text = self.headers.get("Content-Length")
            if text is None:
                return 0
            text = text.strip()
            length = int(text) if text.isdigit() and len(text) <= 18 else -1
            if length < 0 or length > MAX_BODY_BYTES:
                self.close_connection = True
                if length > MAX_BODY_BYTES:
                    raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes")
                raise BadRequest(f"Content-Length must be a number of bytes >= 0; got {text!r}")
            return length

        def _serve(self, method):
            try:
                server.check_origin(self.headers.get("Host"), self.headers.get("Origin"))
                length = self._length()
                with server.reading(length):
                    body = self.rfile.read(length) if length else b""
                    if len(body) < length:
                        self.close_connection = True
                        return  # cut off, or the client closed: nothing to answer
                    self._deadline.cancel()  # read whole: the model may take its time
                    self._answer(200, server.route(method, self.path, body))
            except BadRequest as err:
                self._answer(400, {"error": str(err)})
            except Forbidden as err:
                self.close_connection = True
                self._answer(403, {"error": str(err)})
            except NotFound as err:
                self._answer(404, {"error": str(err)})
            except Busy as err:
                self.close_connection = True
                self._answer(503, {"error": str(err)})
            except (ConnectionError, TimeoutError):
                self.close_connection = True
            except Exception as err:  # the server keeps serving; the client learns why
                self._answer(500, {"error": f"{type(err).__name__}: {err}"})

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def log_message(self, format, *args):
            pass

    return Handler


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most `dev.max_connections` of them; one more gets 503."""

    daemon_threads = True

    def __init__(self, address, handler, dev):
        self.dev = dev
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self.dev.connection_slots.acquire(blocking=False):
            body = json.dumps({"error": "too many connections; retry shortly"}).encode()
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Retry-After: 1\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.dev.connection_slots.release()

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client hanging up is no error
