// What the client's tests share: the studio they run against (STUDIO_URL and
// STUDIO_KEY, set by tests/clients/test_js_client.py), plain requests to
// check what the client did, the scripted model's messages, and a
// WebSocket the tests can cut and hold back.

import WebSocket from 'ws'

export const studio = {
  url: process.env.STUDIO_URL,
  key: process.env.STUDIO_KEY,
}
if (!studio.url || !studio.key) {
  throw new Error(
    'These tests run against a studio: set STUDIO_URL and STUDIO_KEY (a designer key of a game on the ' +
      "scripted model), or run them through pytest: tests/clients/test_js_client.py starts one.",
  )
}

// A model that calls several tools in one step (the scripted model calls one
// a step): tests/support/several_calls_model.py, which the pytest run starts.
export const severalCallsModel = process.env.STUDIO_SEVERAL_CALLS_MODEL

let names = 0
/** An agent name no other test uses. */
export function uniqueName(prefix) {
  names += 1
  return `${prefix}-${process.pid}-${names}`
}

/** A request made without the client; `{ status, body }`. */
export async function raw(method, path, body) {
  const response = await fetch(studio.url + path, {
    method,
    headers: { Authorization: `Bearer ${studio.key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await response.text()
  return { status: response.status, body: text ? JSON.parse(text) : null }
}

/** A message the scripted model plays: tool calls, then what it says. */
export function script(...steps) {
  return JSON.stringify({ script: steps })
}

export function call(tool, args) {
  return { call: tool, args }
}

/** A fetch that records each request (method, path, status, Idempotency-Key) in `calls`. */
export function recordingFetch(inner = fetch) {
  const calls = []
  const recording = async (url, init = {}) => {
    const entry = {
      method: init.method ?? 'GET',
      path: new URL(url).pathname,
      idempotencyKey: init.headers?.['Idempotency-Key'] ?? null,
      status: null,
    }
    calls.push(entry)
    const response = await inner(url, init)
    entry.status = response.status
    return response
  }
  return { fetch: recording, calls }
}

/** Resolves once `predicate()` holds (looked at every 20 ms); fails after `seconds`. */
export async function eventually(predicate, what, seconds = 20) {
  const deadline = Date.now() + seconds * 1000
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`not reached in ${seconds} s: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/**
 * A WebSocket class over `ws` whose sockets a test can cut (`cut()`: the
 * connection drops, no close frame) and whose new sockets it can hold back
 * (`hold()` … `release()`), recording each socket's URL in `urls`.
 */
export function controlledWebSockets() {
  const sockets = []
  let held = null
  let release = () => {}

  class ControlledWebSocket extends EventTarget {
    constructor(url, protocols) {
      super()
      this.url = url
      this.closed = false
      sockets.push(this)
      const open = () => {
        if (this.closed) return
        this.real = new WebSocket(url, protocols)
        for (const type of ['open', 'message', 'close', 'error']) {
          this.real.addEventListener(type, (event) =>
            this.dispatchEvent(Object.assign(new Event(type), { data: event.data, code: event.code })),
          )
        }
      }
      if (held) held.then(open)
      else open()
    }

    close(code) {
      this.closed = true
      this.real?.close(code)
    }

    cut() {
      this.real.terminate()
    }
  }

  return {
    WebSocket: ControlledWebSocket,
    sockets,
    get urls() {
      return sockets.map((socket) => socket.url)
    },
    hold() {
      held = new Promise((resolve) => {
        release = resolve
      })
    },
    release() {
      held = null
      release()
    },
  }
}

/** A listener beside the client's, on plain `ws`: every event of the agent from now on. */
export async function referenceListener(name) {
  const url = `${studio.url.replace(/^http/, 'ws')}/ws/v1/agents/${name}/events`
  const socket = new WebSocket(url, ['studio.v1', `bearer.${studio.key}`])
  const events = []
  await new Promise((resolve, reject) => {
    socket.on('message', (data) => {
      const event = JSON.parse(String(data))
      if (event.type === 'hello') resolve()
      else events.push(event)
    })
    socket.on('error', reject)
  })
  return { events, close: () => socket.close() }
}
