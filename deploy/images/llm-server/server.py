#!/usr/bin/env python3
"""A small OpenAI-style inference server for Gantry's CPU inference image.

Python's standard library only. It speaks the parts of the OpenAI HTTP API
that clients of vLLM use — GET /v1/models, POST /v1/completions and
POST /v1/chat/completions (with "stream": true as server-sent events), and
usage counts — over a tiny deterministic model: a word-level Markov chain
learnt at start from a short text, so the same prompt always gets the same
answer. GET /health answers 200 once it is ready; GET /metrics gives
Prometheus counters named as vLLM's are.

Settings, from the environment: PORT (8000), MODEL_NAME (gantry/markov-tiny),
MAX_TOKENS_LIMIT (512).
"""
import hashlib
import json
import os
import random
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("PORT", "8000"))
MODEL = os.environ.get("MODEL_NAME", "gantry/markov-tiny")
MAX_TOKENS_LIMIT = int(os.environ.get("MAX_TOKENS_LIMIT", "512"))
CORPUS = """
the cluster runs the job on a node with a gpu and the job writes its checkpoint to the volume .
the notebook opens in the browser and the kernel runs the code in the cell .
the model learns from the data and the loss falls with every step of the training run .
a small model answers the prompt with words it has seen in the text it learnt from .
the platform team signs the image and the node pulls the image from the registry .
when the queue is long the autoscaler adds a node and when the node is idle it goes away .
"""


class Markov:
    def __init__(self, text):
        words = text.split()
        self.next = {}
        for a, b in zip(words, words[1:]):
            self.next.setdefault(a, []).append(b)
        self.words = sorted(set(words))

    def generate(self, prompt, n, seed):
        rnd = random.Random(seed)
        known = [w for w in prompt.lower().split() if w in self.next]
        word = known[-1] if known else rnd.choice(self.words)
        out = []
        for _ in range(n):
            word = rnd.choice(self.next.get(word) or self.words)
            out.append(word)
            if word == "." and len(out) > 3:
                break
        return out


MODEL_IMPL = Markov(CORPUS)
STATS = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0, "running": 0}
LOCK = threading.Lock()


def tokens(text):
    return len(text.split())


class BadRequest(Exception):
    pass


def int_field(body, name, default, lo, hi):
    v = body.get(name, default)
    if v is None:
        v = default
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise BadRequest("%s: want an integer from %d to %d, got %r" % (name, lo, hi, v))
    return v


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gantry-llm-server/0.1"

    def log_message(self, fmt, *args):
        print("%s %s" % (self.address_string(), fmt % args), flush=True)

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, code, message, kind="invalid_request_error"):
        self.send_json(code, {"error": {"message": message, "type": kind, "code": code}})

    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "gantry", "max_model_len": MAX_TOKENS_LIMIT}]})
        elif self.path == "/metrics":
            with LOCK:
                s = dict(STATS)
            lines = [
                "# TYPE vllm:request_success_total counter", 'vllm:request_success_total{model_name="%s"} %d' % (MODEL, s["requests"]),
                "# TYPE vllm:prompt_tokens_total counter", 'vllm:prompt_tokens_total{model_name="%s"} %d' % (MODEL, s["prompt_tokens"]),
                "# TYPE vllm:generation_tokens_total counter", 'vllm:generation_tokens_total{model_name="%s"} %d' % (MODEL, s["generation_tokens"]),
                "# TYPE vllm:num_requests_running gauge", 'vllm:num_requests_running{model_name="%s"} %d' % (MODEL, s["running"]),
            ]
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.error(404, "no route %s %s" % (self.command, self.path), "not_found_error")

    def do_POST(self):
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.error(404, "no route %s %s" % (self.command, self.path), "not_found_error")
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
            if n > 1 << 20:
                raise BadRequest("the body is over 1 MiB")
            try:
                body = json.loads(self.rfile.read(n) or b"null")
            except ValueError as e:
                raise BadRequest("the body is not JSON: %s" % e)
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            if body.get("model", MODEL) != MODEL:
                self.error(404, "model %r: this server serves %r" % (body.get("model"), MODEL), "not_found_error")
                return
            chat = self.path == "/v1/chat/completions"
            prompt = self.prompt(body, chat)
            max_tokens = int_field(body, "max_tokens", 16, 1, MAX_TOKENS_LIMIT)
            seed = body.get("seed")
            if seed is None:
                seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")
            elif not isinstance(seed, int) or isinstance(seed, bool):
                raise BadRequest("seed: want an integer, got %r" % (seed,))
        except BadRequest as e:
            self.error(400, str(e))
            return
        with LOCK:
            STATS["running"] += 1
        try:
            words = MODEL_IMPL.generate(prompt, max_tokens, seed)
            usage = {"prompt_tokens": tokens(prompt), "completion_tokens": len(words),
                     "total_tokens": tokens(prompt) + len(words)}
            rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
            finish = "length" if len(words) >= max_tokens else "stop"
            if body.get("stream"):
                self.stream(rid, chat, words, finish, usage)
            else:
                text = " ".join(words)
                choice = {"index": 0, "finish_reason": finish}
                if chat:
                    choice["message"] = {"role": "assistant", "content": text}
                else:
                    choice["text"] = text
                self.send_json(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                                     "created": int(time.time()), "model": MODEL, "choices": [choice], "usage": usage})
            with LOCK:
                STATS["requests"] += 1
                STATS["prompt_tokens"] += usage["prompt_tokens"]
                STATS["generation_tokens"] += usage["completion_tokens"]
        finally:
            with LOCK:
                STATS["running"] -= 1

    def prompt(self, body, chat):
        if not chat:
            p = body.get("prompt")
            if isinstance(p, list) and all(isinstance(x, str) for x in p):
                p = " ".join(p)
            if not isinstance(p, str):
                raise BadRequest("prompt: want a string or a list of strings")
            return p
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("messages: want a non-empty list")
        parts = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
                raise BadRequest("messages[%d].role: want system, user, assistant or tool" % i)
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(x.get("text", "") for x in c if isinstance(x, dict))
            if not isinstance(c, str):
                raise BadRequest("messages[%d].content: want a string" % i)
            parts.append(c)
        return " ".join(parts)

    def stream(self, rid, chat, words, finish, usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        obj = "chat.completion.chunk" if chat else "text_completion"
        for i, w in enumerate(words):
            text = w if i == 0 else " " + w
            choice = {"index": 0, "finish_reason": finish if i == len(words) - 1 else None}
            if chat:
                choice["delta"] = ({"role": "assistant"} if i == 0 else {}) | {"content": text}
            else:
                choice["text"] = text
            chunk = {"id": rid, "object": obj, "created": int(time.time()), "model": MODEL, "choices": [choice]}
            if i == len(words) - 1:
                chunk["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main():
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    print("serving %s on :%d (OpenAI-style: /v1/models, /v1/completions, /v1/chat/completions)" % (MODEL, PORT), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
