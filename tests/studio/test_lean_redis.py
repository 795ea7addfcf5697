"""The lean Redis client the hot commands go through: it answers as redis-py
does, survives a Redis restart without losing a command, and fails with a
Redis error (never hangs, never mixes up two answers) when Redis is away."""

import socket
import threading
from contextlib import suppress

import pytest
import redis

from studio.runtime.redisconn import LeanRedis, _packed
from tests.conftest import wait_for
from tests.support.redis_server import redis_running


@pytest.fixture
def server(tmp_path):
    with redis_running(tmp_path) as private:
        yield private


def url_of(server) -> str:
    return f"redis://127.0.0.1:{server.port}/3"


def test_answers_are_redis_pys_answers(server):
    lean, plain = LeanRedis(url_of(server)), redis.Redis.from_url(url_of(server))
    plain.rpush("list", b"a", "\u00e9", 7)
    plain.set("big", b"x" * 300_000)  # larger than one read from the socket
    plain.zadd("window", {"member": 1.25})

    for command in (
        ("LRANGE", "list", 0, -1),
        ("GET", "big"),
        ("GET", "missing"),
        ("HGETALL", "missing"),
        ("ZRANGE", "window", 0, -1, "WITHSCORES"),
        ("ZSCORE", "window", "member"),
        ("PING",),
    ):
        assert lean.call(*command) == read_by_redis_py(plain, command), command

    assert lean.call("INCRBY", "counter", 5) == 5
    assert lean.call("SET", "plain", 2.5) == b"OK"
    assert plain.get("plain") == b"2.5"


def read_by_redis_py(client, command):
    """An answer as redis-py's connection reads it, before the client's
    conversions for that command (PING's True, HGETALL's dict)."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command(*command)
        return connection.read_response()
    finally:
        client.connection_pool.release(connection)


def test_a_script_is_loaded_the_first_time_redis_does_not_know_it(server):
    lean = LeanRedis(url_of(server))
    script = lean.script("return {ARGV[1], redis.call('INCR', KEYS[1]), redis.call('ZCARD', KEYS[2])}")

    assert script(keys=["n", "z"], args=["first"]) == [b"first", 1, 0]
    lean.call("SCRIPT", "FLUSH")
    assert script(keys=["n", "z"], args=["again"]) == [b"again", 2, 0]
    assert script(keys=["n", "z"], args=["known"]) == [b"known", 3, 0]


def test_an_error_answer_is_raised_and_the_connection_answers_the_next_command(server):
    lean = LeanRedis(url_of(server))
    lean.call("SET", "text", "not a number")

    with pytest.raises(redis.ResponseError, match="not an integer"):
        lean.call("INCR", "text")
    with pytest.raises(redis.ResponseError):
        lean.script("return redis.call('NOSUCHCOMMAND')")(keys=[], args=[])

    assert lean.call("GET", "text") == b"not a number"
    assert len(lean.idle) == 1  # the one connection, kept through both errors


def test_a_restarted_redis_loses_no_command(server):
    lean = LeanRedis(url_of(server))
    lean.call("SET", "before", 1)
    server.stop()
    server.start()

    assert lean.call("INCR", "after") == 1  # the kept connection died with the old server: sent again
    assert lean.call("GET", "after") == b"1"  # once, not twice


def test_redis_away_is_a_redis_error_and_its_return_is_noticed(server):
    lean = LeanRedis(url_of(server))
    lean.call("PING")
    server.stop()

    for _ in range(2):
        with pytest.raises(redis.ConnectionError):
            lean.call("PING")
    assert lean.idle == []

    server.start()
    assert lean.call("PING") == b"PONG"


def test_a_redis_that_stops_answering_times_out_and_its_connection_is_dropped():
    """A server that takes the connection's handshake, then never answers
    (frozen, or a network dropping packets)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held, heard = [], []

    def serve():
        with suppress(OSError):
            while True:
                conn, _ = listener.accept()
                held.append(conn)
                while (data := conn.recv(65536)) and b"PING" not in data:
                    conn.sendall(b"+OK\r\n" * data.count(b"CLIENT"))
                heard.append(data)

    threading.Thread(target=serve, daemon=True).start()
    # Time enough for the handshake on a busy machine: the PING, not the connect, is to time out.
    lean = LeanRedis(f"redis://127.0.0.1:{listener.getsockname()[1]}/0?protocol=2", timeout=2)
    try:
        with pytest.raises(redis.TimeoutError):
            lean.call("PING")
        # The handshake was answered and the command sent: it timed out, not the connect.
        wait_for(lambda: heard)
        assert b"PING" in heard[0]
        assert lean.idle == []
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_threads_each_get_their_own_answers(server):
    lean = LeanRedis(url_of(server))
    wrong = []

    def run(n):
        for i in range(200):
            if lean.call("ECHO", f"{n}:{i}") != f"{n}:{i}".encode():
                wrong.append((n, i))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert wrong == []
    assert 1 <= len(lean.idle) <= 8


def test_arguments_are_encoded_as_redis_py_encodes_them():
    assert _packed(("SET", "k", 1, 2.5, b"\x00", "\u00e9")) == (
        b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n$3\r\n2.5\r\n$1\r\n\x00\r\n$2\r\n\xc3\xa9\r\n"
    )
    with pytest.raises(TypeError):
        _packed(("SET", "k", True))
    with pytest.raises(TypeError):
        _packed(("SET", "k", None))
