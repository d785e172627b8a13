"""herald-plugin-telegram: a Herald TELEGRAM channel written in Python.

It speaks the same protocol as the Go plugins (herald.channel.v2 over
hashicorp/go-plugin's gRPC transport), with nothing but Debian's
python3-grpcio and python3-protobuf (and the openssl command, which
Debian's ca-certificates brings, for the certificate):

1. go-plugin's handshake: the host sets HERALD_PLUGIN_MAGIC_COOKIE and
   PLUGIN_PROTOCOL_VERSIONS; the plugin listens on 127.0.0.1 and prints
   CORE-VERSION|APP-VERSION|tcp|ADDRESS|grpc|SERVER-CERT on stdout.
2. AutoMTLS: the host passes its client certificate in PLUGIN_CLIENT_CERT;
   the plugin makes a self-signed server certificate for "localhost",
   requires the host's certificate from every client and prints its own
   (base64 DER, no padding) as SERVER-CERT.
3. Services: herald.channel.v2.ChannelPlugin (Describe, Configure, Send,
   Health), grpc.health.v1.Health (go-plugin's Ping checks the service
   "plugin") and plugin.GRPCController (Shutdown, so the host's Kill is a
   clean exit).
4. Logs: one hclog-style JSON object per line on stderr, which the host
   re-emits under the plugin's name.

Deliveries go to the Telegram Bot API's sendMessage: the recipient's
attribute "telegram_chat_id" is the chat, the content's title and body the
text. Each request carries the delivery's idempotency key in the header
X-Herald-Idempotency-Key (and its id in X-Herald-Delivery-Id), for a
gateway in front of the Bot API, or a test peer, to spot duplicates.
"""

import base64
import datetime
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures

import grpc

import herald_channel_v2_pb2 as pb

VERSION = "0.1.0"
# The go-plugin handshake Herald uses (sdk.Handshake).
MAGIC_COOKIE_KEY = "HERALD_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "c3156d02fb53fa45fbc249579d3112d2f6eff4756ddbae5adca569380627cbcd"
# go-plugin's own protocol version (the handshake line's first field) and
# the Herald protocol version this plugin serves.
CORE_PROTOCOL_VERSION = 1
PROTOCOL_VERSION = 2

CHAT_ATTRIBUTE = "telegram_chat_id"
MAX_BATCH = 20
MAX_TEXT = 4096  # Telegram's limit for one message


def log(level, msg, **fields):
    """Writes one hclog JSON line to stderr."""
    rec = {"@level": level, "@message": msg,
           "@timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    rec.update(fields)
    sys.stderr.write(json.dumps(rec) + "\n")
    sys.stderr.flush()


# ---- config: the same checks sdk.CheckConfig makes in Go ----

FIELDS = [
    # name, type, required, secret, default, description
    ("token", "string", True, True, "", "Bot token from @BotFather."),
    ("api_url", "string", False, False, "https://api.telegram.org",
     "Bot API base URL; requests go to <api_url>/bot<token>/<method>."),
    ("timeout", "duration", False, False, "10s", "Timeout of one Bot API request."),
]

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text):
    """Parses a Go duration ("10s", "1m30s", "250ms") into seconds."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    m = re.fullmatch(r"([+-]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|ms|s|m|h))+", s)
    if not m:
        raise ValueError("must be a duration such as \"5s\", got %r" % text)
    total = sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)", s))
    return -total if m.group(1) == "-" else total


class ConfigError(Exception):
    def __init__(self, field, msg):
        super().__init__(msg)
        self.field, self.msg = field, msg


def check_config(values):
    """Checks the operator's config like sdk.CheckConfig: unknown keys,
    types, required fields; returns a dict with defaults applied."""
    known = [f[0] for f in FIELDS]
    for key in sorted(values):
        if key not in known:
            raise ConfigError(key, "unknown field (known: %s)" % ", ".join(known))
    out = {}
    for name, typ, required, secret, default, _ in FIELDS:
        v = values.get(name)
        kind = v.WhichOneof("kind") if v is not None else None
        if kind is None:
            if required:
                raise ConfigError(name, "required")
            v, kind = default, "default"
        if typ == "string":
            if kind == "default":
                out[name] = v
            elif kind != "string_value":
                raise ConfigError(name, "must be a string" + ("; the value is secret and not shown" if secret else ", got " + kind.replace("_value", "")))
            elif required and v.string_value == "":
                raise ConfigError(name, "required, must not be empty")
            else:
                out[name] = v.string_value
        elif typ == "duration":
            try:
                if kind == "default":
                    out[name] = parse_duration(v)
                elif kind == "duration_value":
                    out[name] = v.duration_value.seconds + v.duration_value.nanos / 1e9
                elif kind == "string_value":
                    out[name] = parse_duration(v.string_value)
                else:
                    raise ValueError("must be a duration such as \"5s\", got " + kind.replace("_value", ""))
            except ValueError as e:
                raise ConfigError(name, str(e))
    if not re.fullmatch(r"https?://[^/\s]+.*", out["api_url"]):
        raise ConfigError("api_url", "must be an http(s) URL, got %r" % out["api_url"])
    if out["timeout"] <= 0:
        raise ConfigError("timeout", "must be positive")
    out["api_url"] = out["api_url"].rstrip("/")
    return out


# ---- the channel ----

class Telegram:
    def __init__(self):
        self.lock = threading.Lock()
        self.cfg = None

    def describe(self, request, context):
        d = pb.DescribeResponse(
            channel_type="TELEGRAM", provider="telegram-bot-api", plugin_version=VERSION,
            api_versions=[PROTOCOL_VERSION], **{"class": pb.CLASS_PERSISTENT}, max_batch=MAX_BATCH,
            capabilities=["idempotency_key"], sdk_version="python-example")
        for name, typ, required, secret, default, desc in FIELDS:
            d.config.add(name=name, type=typ, required=required, secret=secret, default=default, description=desc)
        return d

    def configure(self, request, context):
        try:
            cfg = check_config(request.config)
        except ConfigError as e:
            log("warn", "config refused", provider=request.provider_name, field=e.field, error=e.msg)
            return pb.ConfigureResponse(config_error=pb.ConfigError(field=e.field, message=e.msg))
        with self.lock:
            self.cfg = cfg
        log("info", "configured", provider=request.provider_name)
        return pb.ConfigureResponse()

    def current(self):
        with self.lock:
            return self.cfg

    def call(self, cfg, method, payload=None, delivery=None):
        """Calls a Bot API method; returns (HTTP status, decoded JSON body, headers)."""
        url = "%s/bot%s/%s" % (cfg["api_url"], cfg["token"], method)
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
        req.add_header("Content-Type", "application/json")
        if delivery is not None:
            req.add_header("X-Herald-Idempotency-Key", delivery.idempotency_key)
            req.add_header("X-Herald-Delivery-Id", delivery.delivery_id)
        try:
            with urllib.request.urlopen(req, timeout=cfg["timeout"]) as resp:
                return resp.status, json.loads(resp.read() or b"{}"), resp.headers
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read() or b"{}")
            except ValueError:
                body = {}
            return e.code, body, e.headers

    def send_one(self, cfg, d):
        """Sends one delivery and returns its pb.Result."""
        r = pb.Result(delivery_id=d.delivery_id)
        chat = d.recipient.attributes.get(CHAT_ATTRIBUTE, "")
        if not chat:
            r.outcome, r.reason, r.code = pb.OUTCOME_PERMANENT, "telegram: recipient has no %s attribute" % CHAT_ATTRIBUTE, "no_address"
            return r
        text = "\n\n".join(p for p in (d.content.title, d.content.body) if p)[:MAX_TEXT]
        try:
            status, body, headers = self.call(cfg, "sendMessage", {"chat_id": chat, "text": text}, d)
        except Exception as e:  # network errors, timeouts, bad JSON: transient
            r.outcome, r.reason = pb.OUTCOME_RETRYABLE, "telegram: sendMessage: %s" % e
            return r
        desc = body.get("description", "") if isinstance(body, dict) else ""
        if status == 200 and isinstance(body, dict) and body.get("ok"):
            r.outcome = pb.OUTCOME_SENT
            r.provider_message_id = "%s/%s" % (chat, body.get("result", {}).get("message_id", ""))
        elif status == 429:
            after = (body.get("parameters") or {}).get("retry_after") if isinstance(body, dict) else None
            if after is None and headers is not None and (headers.get("Retry-After") or "").isdigit():
                after = int(headers.get("Retry-After"))
            r.outcome, r.reason = pb.OUTCOME_RATE_LIMITED, "telegram: 429 %s" % desc
            if after:
                r.retry_after.seconds = int(after)
        elif status == 408 or status >= 500:
            r.outcome, r.reason = pb.OUTCOME_RETRYABLE, "telegram: %d %s" % (status, desc)
        else:
            r.outcome, r.reason, r.code = pb.OUTCOME_PERMANENT, "telegram: %d %s" % (status, desc), str(body.get("error_code", status)) if isinstance(body, dict) else str(status)
        return r

    def send(self, request, context):
        cfg = self.current()
        if cfg is None:
            return pb.SendResponse(batch_error=pb.BatchError(message="telegram: not configured", outcome=pb.OUTCOME_RETRYABLE))
        out = pb.SendResponse()
        stop = None
        for d in request.deliveries:
            if stop is None and not context.is_active():
                stop = pb.Result(outcome=pb.OUTCOME_RETRYABLE, reason="not attempted: the host cancelled the call")
            if stop is not None:
                r = pb.Result()
                r.CopyFrom(stop)
                r.delivery_id = d.delivery_id
                out.results.append(r)
                continue
            r = self.send_one(cfg, d)
            out.results.append(r)
            if r.outcome == pb.OUTCOME_RATE_LIMITED:
                stop = pb.Result(outcome=pb.OUTCOME_RATE_LIMITED, reason="not attempted: provider rate limited")
                stop.retry_after.CopyFrom(r.retry_after)
        return out

    def health(self, request, context):
        cfg = self.current()
        if cfg is None:
            return pb.HealthResponse(healthy=False, message="telegram: not configured")
        try:
            status, body, _ = self.call(cfg, "getMe")
        except Exception as e:
            return pb.HealthResponse(healthy=False, message="telegram: getMe: %s" % e)
        if status == 200 and isinstance(body, dict) and body.get("ok"):
            return pb.HealthResponse(healthy=True, message="telegram: bot %s" % body.get("result", {}).get("username", "?"))
        return pb.HealthResponse(healthy=False, message="telegram: getMe: %d %s" % (status, body.get("description", "") if isinstance(body, dict) else ""))


# ---- go-plugin plumbing ----

def server_certificate():
    """Makes the self-signed certificate AutoMTLS wants: CN and SAN
    localhost, a CA, for server and client auth, on a P-256 key, with the
    openssl command (OpenSSL 3). Returns (cert PEM, key PEM, cert DER)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is missing (Debian: apt-get install openssl)")
    d = tempfile.mkdtemp(prefix="herald-plugin-tls-")
    try:
        key_file, cert_file = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", key_file, "-out", cert_file, "-days", "3650",
                        "-subj", "/CN=localhost/O=Herald plugin",
                        "-addext", "subjectAltName=DNS:localhost",
                        "-addext", "basicConstraints=critical,CA:TRUE",
                        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyAgreement,keyCertSign",
                        "-addext", "extendedKeyUsage=serverAuth,clientAuth"],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(cert_file, "rb") as f:
            cert_pem = f.read()
        with open(key_file, "rb") as f:
            key_pem = f.read()
    except subprocess.CalledProcessError as e:
        raise RuntimeError("openssl req: %s" % e.stderr.decode(errors="replace").strip())
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return cert_pem, key_pem, ssl.PEM_cert_to_DER_cert(cert_pem.decode())


def identity(b):
    return b


def watch_host(stop):
    """Exits when the host process is gone (the plugin was re-parented)."""
    want = os.getppid()
    try:
        want = int(os.environ.get("HERALD_PLUGIN_HOST_PID", "")) or want
    except ValueError:
        pass
    while not stop.wait(0.5):
        if os.getppid() != want:
            log("warn", "host process is gone; exiting", host_pid=want, ppid=os.getppid())
            os._exit(3)


def main():
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        sys.stderr.write("This binary is a Herald channel plugin. The Herald host runs it; it is not meant to be run by hand.\n")
        return 1
    offered = [v for v in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(PROTOCOL_VERSION)).split(",") if v]
    if str(PROTOCOL_VERSION) not in offered:
        sys.stderr.write("herald-plugin-telegram: the host offers protocol versions %s; this plugin speaks %d\n" % (",".join(offered), PROTOCOL_VERSION))
        return 1

    # Like go-plugin's Go servers: an interrupt from the terminal is the
    # host's to handle; the host stops the plugin through Shutdown or kill.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    ch = Telegram()
    unary = grpc.unary_unary_rpc_method_handler
    channel_service = grpc.method_handlers_generic_handler("herald.channel.v2.ChannelPlugin", {
        "Describe": unary(ch.describe, pb.DescribeRequest.FromString, pb.DescribeResponse.SerializeToString),
        "Configure": unary(ch.configure, pb.ConfigureRequest.FromString, pb.ConfigureResponse.SerializeToString),
        "Send": unary(ch.send, pb.SendRequest.FromString, pb.SendResponse.SerializeToString),
        "Health": unary(ch.health, pb.HealthRequest.FromString, pb.HealthResponse.SerializeToString),
    })
    # grpc.health.v1.HealthCheckResponse{status: SERVING} is field 1 = 1.
    health_service = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": unary(lambda req, ctx: b"\x08\x01", identity, identity),
    })

    def shutdown(req, ctx):
        log("info", "host asked the plugin to shut down")
        stop.set()
        return b""  # plugin.Empty
    controller_service = grpc.method_handlers_generic_handler("plugin.GRPCController", {
        "Shutdown": unary(shutdown, identity, identity),
    })

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((channel_service, health_service, controller_service))
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "")
    cert_field = ""
    if client_cert:
        cert_pem, key_pem, der = server_certificate()
        creds = grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=client_cert.encode(),
                                            require_client_auth=True)
        port = server.add_secure_port("127.0.0.1:0", creds)
        cert_field = base64.b64encode(der).decode().rstrip("=")
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    threading.Thread(target=watch_host, args=(stop,), daemon=True).start()
    log("info", "plugin serving", version=VERSION, port=port, mtls=bool(client_cert))
    sys.stdout.write("%d|%d|tcp|127.0.0.1:%d|grpc|%s\n" % (CORE_PROTOCOL_VERSION, PROTOCOL_VERSION, port, cert_field))
    sys.stdout.flush()
    stop.wait()
    # Let the Shutdown answer reach the host, then stop.
    server.stop(grace=1).wait()
    log("info", "plugin stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
