"""The development server's HTTP side: a request handler with a whole-request deadline,
and a threading server that serves at most `max_connections` connections at once.

A connection that has sent nothing of a request yet (a new one, or a kept-alive one
between requests) is idle: when every slot is taken, the longest idle connection is
closed to make room, so idle sockets never keep a client with a request waiting. A
connection is idle from the moment its answer is committed: a client that reads its
answer and opens a new connection at once finds the old one's slot reclaimable, even
while the old thread is still writing its last bytes or has not yet looked for the next
request (it is closed once the answer is out)."""

import contextlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from keras_saat.errors import KerasSaatError
from keras_saat.serving.answers import BadRequest, Busy, Forbidden, NotFound, Page
from keras_saat.serving.request_checks import MAX_BODY_BYTES

READ_CHUNK = 1 << 20  # bytes read (and reserved) at a time from a request body
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def http_handler(server):
    """The request handler class of `server` (a DevServer): one request at a time per
    connection, read whole within `server.read_timeout`, answered as TF Serving answers."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = server.read_timeout  # each read on the socket, idle keep-alive included

        def setup(self):
            super().setup()
            self._answer_lock = threading.Lock()
            self._answering = self._reclaimed = False

        def handle_one_request(self):
            # The whole request must arrive within read_timeout: a client trickling
            # bytes resets the per-read timeout but not this deadline.
            self._deadline = threading.Timer(server.read_timeout, self._cut)
            self._deadline.daemon = True
            self._deadline.start()
            server.idle_since(self.connection, self._reclaim)
            try:
                super().handle_one_request()
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True  # the client went away or was cut off
            finally:
                self._deadline.cancel()
            # Still idle when no request line came (the thread ends), or idle again
            # since its answer was committed; BoundedHTTPServer forgets it at the end.

        def parse_request(self):
            server.not_idle(self.connection)  # a request line arrived: not to reclaim
            return super().parse_request()

        def _cut(self):
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _reclaim(self):
            """Frees this connection's slot for a new one: closes it now if it waits
            for a request, or once the answer being written is out."""
            with self._answer_lock:
                if self._answering:
                    self._reclaimed = True
                    return
            self._cut()

        def _answer(self, status, payload):
            kind = "application/json"
            if isinstance(payload, Page):
                data, kind = payload.encode("utf-8"), "text/html; charset=utf-8"
            else:
                data = json.dumps(payload).encode("utf-8")
            with self._answer_lock:
                self._answering = True
            # The answer is committed: the client may open its next connection as soon
            # as it reads it, so this one is reclaimable from now on.
            server.idle_since(self.connection, self._reclaim)
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
            finally:
                with self._answer_lock:
                    self._answering = False
                    if self._reclaimed:
                        self.close_connection = True  # its slot went to a new connection

        def _body(self, length, reserve):
            """The body's `length` bytes, read a chunk at a time and reserved (`reserve`,
            DevServer.reading) as each chunk arrives; None when the client stops first.

            The declared length only caps the reading: nothing is allocated or reserved
            for bytes that have not arrived, so a slow or lying client holds only what
            it has sent.
            """
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
                with server.reading() as reserve:
                    body = self._body(length, reserve)
                    if body is None:
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
        slots = self.dev.connection_slots
        if not slots.acquire(blocking=False) and not (
            self.dev.close_longest_idle() and slots.acquire(timeout=2.0)
        ):
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
            # The slot first: a connection reclaimed meanwhile finds it free at once.
            self.dev.connection_slots.release()
            self.dev.not_idle(request)

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client hanging up is no error


class RequestGate:
    """What an HTTP request meets before any route: the connection limit, the
    whole-request deadline, the budget of body bytes held at once, and the Host and
    Origin check. DevServer adds the model; a bare gate answers every path 404.

    Args:
        host: str. Address to bind. Defaults to "127.0.0.1".
        port: int. REST port (0 = any free port). Defaults to 0.
        max_inflight: int. Requests run at once; the body budget is this many
            full-size bodies. Defaults to 4.
        max_connections: int. Connections served at once. Defaults to 32.
        read_timeout: float. Seconds a request has to arrive whole. Defaults to 30.
    """

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
        self._idle = {}  # connection -> (monotonic time it became idle, its reclaim)
        self._http = None

    def idle_since(self, connection, reclaim):
        """Marks a connection idle (its answer committed, or waiting for a request's
        first line) from now on, or since it last became idle if it still is."""
        with self._count_lock:
            since = self._idle.get(connection, (time.monotonic(),))[0]
            self._idle[connection] = (since, reclaim)

    def not_idle(self, connection):
        with self._count_lock:
            self._idle.pop(connection, None)

    def close_longest_idle(self):
        """Closes the connection idle the longest, freeing its slot once its thread ends;
        returns whether there was one."""
        with self._count_lock:
            if not self._idle:
                return False
            connection = min(self._idle, key=lambda c: self._idle[c][0])
            _, reclaim = self._idle.pop(connection)
        reclaim()
        return True

    def route(self, method, path, body):
        raise NotFound(f"malformed request: {method} {path}")

    def check_origin(self, host, origin):
        """Raises Forbidden for a Host that is not this loopback server's, or a foreign Origin.

        Served on a loopback address, the server answers only to loopback host names
        (DNS rebinding gives a page another name for 127.0.0.1). A browser sends Origin
        with a cross-site POST; the page's own requests come from this server's origin.
        """
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
        """A reservation of request-body bytes, grown as they arrive: yields `reserve(n)`,
        which raises Busy when the bodies held at once would exceed `max_inflight`
        full-size bodies. All of it is released on leaving, however the request ends.

        Reserving on bytes received, not on a Content-Length, keeps a client that
        announces a large body and sends it slowly from holding budget it never fills.
        """
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
