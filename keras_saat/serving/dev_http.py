"""The development server's HTTP side: a request handler with a whole-request deadline,
and a threading server of bounded connections, idle ones giving up their slots."""

import contextlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from keras_saat.errors import KerasSaatError
from keras_saat.io_utils import whole_number
from keras_saat.serving.answers import BadRequest, Busy, Forbidden, NotFound, Page
from keras_saat.serving.request_checks import MAX_BODY_BYTES

READ_CHUNK = 1 << 20  # bytes read (and reserved) at a time from a request body
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
STATUS = {BadRequest: 400, Forbidden: 403, NotFound: 404, Busy: 503}  # 403 and 503 close


def http_handler(server):
    """The request handler class of `server` (a DevServer): one request at a time per
    connection, read whole within `server.read_timeout`, answered as TF Serving answers."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = server.read_timeout  # each read on the socket, idle keep-alive included

        def handle_one_request(self):
            # A client trickling bytes resets the per-read timeout but not this deadline.
            self._deadline = threading.Timer(server.read_timeout, self._cut)
            self._deadline.daemon = True
            self._deadline.start()
            server.idle_since(self.connection)
            try:
                super().handle_one_request()
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True  # the client went away or was cut off
            finally:
                self._deadline.cancel()

        def parse_request(self):
            # False when reclaimed meanwhile: the connection is shut, nobody to answer.
            return server.not_idle(self.connection) and super().parse_request()

        def _cut(self):
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _answer(self, status, payload):
            page = isinstance(payload, Page)
            data = (payload if page else json.dumps(payload)).encode("utf-8")
            kind = "text/html; charset=utf-8" if page else "application/json"
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

        def _body(self, length, reserve):
            """The body's `length` bytes, each chunk reserved as it arrives (so a lying
            client holds only what it sent); None when the client stops first."""
            body = bytearray()
            while len(body) < length:
                chunk = self.rfile.read1(min(READ_CHUNK, length - len(body)))
                if not chunk:
                    return None
                reserve(len(chunk))  # Busy closes the connection: the rest cannot be skipped
                body += chunk
            return body

        def _length(self):
            """The body's declared length; a bad one closes the connection (its body
            cannot be skipped) and answers 400."""
            if self.headers.get("Transfer-Encoding") is not None:
                self.close_connection = True  # the body's end cannot be found
                raise BadRequest("Transfer-Encoding is not supported; send a Content-Length")
            text = self.headers.get("Content-Length", "0").strip()
            length = whole_number(text)
            if length is None:
                self.close_connection = True
                raise BadRequest(f"Content-Length must be a number of bytes >= 0; got {text!r}")
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes")
            return length

        def do_GET(self):
            """Answers a GET or a POST (`self.command`) as `server.route` has it."""
            try:
                server.check_origin(self.headers.get("Host"), self.headers.get("Origin"))
                length = self._length()
                with server.reading() as reserve:
                    body = self._body(length, reserve)
                    if body is None:
                        self.close_connection = True
                        return  # cut off, or the client closed: nothing to answer
                    self._deadline.cancel()  # read whole: the model may take its time
                    self._answer(200, server.route(self.command, self.path, body))
            except tuple(STATUS) as err:
                self.close_connection |= isinstance(err, (Forbidden, Busy))
                self._answer(STATUS[type(err)], {"error": str(err)})
            except (ConnectionError, TimeoutError):
                self.close_connection = True
            except Exception as err:  # the server keeps serving; the client learns why
                self._answer(500, {"error": f"{type(err).__name__}: {err}"})

        do_POST = do_GET

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
        if not self.dev.take_connection_slot():
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
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.dev.connection_ended(request)  # no thread started: nothing will release it
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.dev.connection_ended(request)

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client hanging up is no error


class RequestGate:
    """What an HTTP request meets before any route: the connection limit, the
    whole-request deadline, the budget of body bytes held at once (`max_inflight`
    full-size bodies), and the Host and Origin check. DevServer adds the model (and
    documents the arguments); a bare gate answers every path 404."""

    def __init__(
        self, host="127.0.0.1", port=0, max_inflight=4, max_connections=32, read_timeout=30.0
    ):
        self.host, self.port = host, int(port)
        self.max_inflight = max(int(max_inflight), 1)
        self.max_connections = max(int(max_connections), 1)
        self.read_timeout = float(read_timeout)
        self.connection_slots = threading.BoundedSemaphore(self.max_connections)
        self._count_lock = threading.Lock()
        self._reading = 0  # bytes of request bodies held
        self._idle = {}  # connection -> monotonic time it began waiting for a request
        self._http = None

    def idle_since(self, connection):
        """Marks a connection idle: waiting for its next request line."""
        with self._count_lock:
            self._idle[connection] = time.monotonic()

    def not_idle(self, connection):
        """Marks a connection busy; False when it was reclaimed first."""
        with self._count_lock:
            return self._idle.pop(connection, None) is not None

    def take_connection_slot(self):
        """A slot for a new connection: a free one, else the one the longest idle
        connection frees, else one whose answer ends within a second; False if none."""
        slots = self.connection_slots
        if slots.acquire(blocking=False):
            return True
        with self._count_lock:
            longest = min(self._idle, key=self._idle.get, default=None)
            self._idle.pop(longest, None)
        if longest is not None:
            with contextlib.suppress(OSError):
                longest.shutdown(socket.SHUT_RDWR)  # its thread ends, freeing its slot
        return slots.acquire(timeout=1.0)

    def connection_ended(self, connection):
        """Its thread is done: the connection is forgotten and its slot freed at once."""
        with self._count_lock:
            self._idle.pop(connection, None)
            self.connection_slots.release()

    def route(self, method, path, body):
        raise NotFound(f"malformed request: {method} {path}")

    def check_origin(self, host, origin):
        """Raises Forbidden for a non-loopback Host on a loopback server (DNS rebinding),
        or a foreign Origin (a cross-site POST)."""
        name = (host or "").strip().lower()
        name = name.rsplit(":", 1)[0] if name.count(":") == 1 or name.startswith("[") else name
        if self.host in LOOPBACK_HOSTS and name not in LOOPBACK_HOSTS:
            raise Forbidden(
                f"Host {host!r} is not a loopback name; this server answers 127.0.0.1 and localhost"
            )
        if origin and origin.strip().lower() not in {f"http://{(host or '').strip().lower()}"}:
            raise Forbidden(f"requests from the page at {origin} are not accepted here")

    @contextlib.contextmanager
    def reading(self):
        """Yields `reserve(n)`, which reserves request-body bytes as they arrive and raises
        Busy past `max_inflight` full-size bodies; released on leaving."""
        held = 0

        def reserve(count):
            nonlocal held
            with self._count_lock:
                if self._reading + count > self.max_inflight * MAX_BODY_BYTES:
                    raise Busy("the server is reading other large requests; retry shortly")
                self._reading += count
                held += count

        try:
            yield reserve
        finally:
            with self._count_lock:
                self._reading -= held

    def start_http(self):
        """Starts the HTTP side in a background thread; returns self (the port is then known)."""
        try:
            self._http = BoundedHTTPServer((self.host, self.port), http_handler(self), self)
        except OSError as err:
            raise KerasSaatError(
                f"cannot listen on {self.host}:{self.port}: {err.strerror}"
            ) from None
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop_http(self):
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"
