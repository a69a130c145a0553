"""fuzz_http.py — api_fuzz.py's transport: sends one Req and returns a Result
(status, headers, body, or the transport error) over http.client, or over
a raw socket for a truncated upload (Content-Length larger than what is
sent) and for a client that hangs up in the middle of a streamed answer."""
import http.client
import socket
import time
import urllib.parse


class Result:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = b""
        self.error = None      # transport error text
        self.elapsed = 0.0


def host_port(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or 80


def send(url, r, timeout):
    host, port = host_port(url)
    res = Result()
    t0 = time.time()
    try:
        if r.mode in ("truncated_upload", "disconnect"):
            return send_raw(host, port, r, timeout, res, t0)
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.putrequest(r.method, r.path, skip_accept_encoding=True)
            for k, v in r.headers.items():
                conn.putheader(k, v)
            if r.body is not None:
                conn.putheader("Content-Length", str(len(r.body)))
            conn.endheaders()
            if r.body is not None:
                try:
                    conn.send(r.body)
                except (BrokenPipeError, ConnectionResetError):
                    if r.mode != "oversize":
                        raise
            resp = conn.getresponse()
            res.status = resp.status
            res.headers = {k.lower(): v for k, v in resp.getheaders()}
            res.body = resp.read() if r.method != "HEAD" else b""
        finally:
            conn.close()
    except socket.timeout:
        res.error = f"timeout after {timeout}s (hang?)"
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead,
            ConnectionRefusedError, http.client.HTTPException, OSError) as ex:
        res.error = f"{type(ex).__name__}: {ex}"
    res.elapsed = time.time() - t0
    return res


def send_raw(host, port, r, timeout, res, t0):
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        head = f"{r.method} {r.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        for k, v in r.headers.items():
            head += f"{k}: {v}\r\n"
        body = r.body or b""
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        if r.mode == "truncated_upload":
            cut = len(body) // 2
            s.sendall(head.encode("latin1") + body[:cut])
            s.shutdown(socket.SHUT_WR)  # the rest never comes
            s.settimeout(10)
            try:
                data = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                data = b""
            res.status = -1  # nothing expected
            res.body = data
            return res
        # disconnect: read the status line and a little of the stream, then hang up
        s.sendall(head.encode("latin1") + body)
        data = b""
        deadline = time.time() + timeout
        want = 200 + (len(body) % 700)
        while len(data) < want and time.time() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        res.body = data
        try:
            res.status = int(data.split(b" ", 2)[1])
        except (IndexError, ValueError):
            res.status = -1
        return res
    finally:
        s.close()
        res.elapsed = time.time() - t0
