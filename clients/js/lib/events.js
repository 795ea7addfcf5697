// An agent's live events over one WebSocket, shared by every handler of
// that agent on one `io`: the key goes as the `bearer.<key>` subprotocol
// beside `studio.v1`, and after a drop the socket comes back with
// `?since=<the last seq heard>`, so no event is lost or heard twice.

import { StudioError } from './errors.js'
import { backoff } from './http.js'

// Close codes after which trying again cannot help.
const FINAL_CLOSES = {
  4400: ['invalid_request', 'The studio closed the event stream: it did not understand the request.'],
  4401: ['unauthenticated', 'The studio refused the event stream: the API key is not valid, or was revoked.'],
  4404: ['agent_not_found', 'The studio has no agent of this name in the key\'s game.'],
}
const TOO_MANY_STREAMS = 4429

export class Listener {
  /**
   * @param {object} options
   * @param {string} options.url the studio's base URL (http or https)
   * @param {string} options.key
   * @param {string} options.name the agent's name
   * @param {Promise<unknown>} options.ready connected once this settles
   * @param {Function|undefined} options.WebSocket a WebSocket class to use
   * @param {() => void} options.onStop called once the listener has stopped
   */
  constructor({ url, key, name, ready, WebSocket, onStop }) {
    this.url = `${url.replace(/^http/, 'ws')}/ws/v1/agents/${encodeURIComponent(name)}/events`
    this.key = key
    this.name = name
    this.WebSocket = WebSocket
    this.onStop = onStop
    this.handlers = new Map()
    this.since = null // the seq of the last event heard, or the one hello started after
    this.hadHello = false
    this.failures = 0
    this.socket = null
    this.timer = null
    this.stopped = false
    // Settles when the first socket is open (hello) or has failed: a send
    // through the same `io` waits for it, so it hears the send's events.
    this.opened = new Promise((resolve) => {
      this.markOpened = resolve
    })
    ready.catch(() => {}).then(() => this.connect())
  }

  add(type, handler) {
    if (!this.handlers.has(type)) this.handlers.set(type, new Set())
    // Each `on` is its own subscription, even of the same function.
    const entry = (event) => handler(event)
    this.handlers.get(type).add(entry)
    let removed = false
    return () => {
      if (removed) return
      removed = true
      const set = this.handlers.get(type)
      set?.delete(entry)
      if (set && !set.size) this.handlers.delete(type)
      if (!this.handlers.size) this.stop()
    }
  }

  stop() {
    if (this.stopped) return
    this.stopped = true
    clearTimeout(this.timer)
    const socket = this.socket
    this.socket = null
    if (socket) {
      try {
        socket.close(1000)
      } catch {
        // already closing
      }
    }
    this.markOpened()
    this.onStop()
  }

  async connect() {
    if (this.stopped) return
    let WebSocketClass
    try {
      WebSocketClass = await webSocketClass(this.WebSocket)
    } catch (error) {
      this.fail({ type: 'error', code: error.code, message: error.message })
      return
    }
    if (this.stopped) return
    // Resuming: after the last seq heard; a socket that dropped before its
    // hello named one asks from 0, and hears `resync` if it may have missed any.
    const since = this.since ?? (this.hadHello ? 0 : null)
    const socket = new WebSocketClass(this.url + (since == null ? '' : `?since=${since}`), [
      'studio.v1',
      `bearer.${this.key}`,
    ])
    this.socket = socket
    this.lastError = null
    socket.addEventListener('message', (event) => this.received(socket, event.data))
    socket.addEventListener('close', (event) => this.closed(socket, event.code))
    socket.addEventListener('error', () => {}) // a close follows
  }

  received(socket, data) {
    if (socket !== this.socket) return
    let event
    try {
      event = JSON.parse(typeof data === 'string' ? data : String(data))
    } catch {
      return
    }
    if (event.type === 'hello') {
      this.hadHello = true
      this.failures = 0
      if (this.since == null && typeof event.seq === 'number') this.since = event.seq
      this.markOpened()
      return
    }
    if (event.type === 'resync') {
      if (typeof event.seq === 'number') this.since = event.seq
    } else if (typeof event.seq === 'number') {
      if (this.since != null && event.seq <= this.since) return // heard already
      this.since = event.seq
    } else if (event.type === 'error') {
      this.lastError = event
    }
    this.dispatch(event)
  }

  closed(socket, code) {
    if (socket !== this.socket) return
    this.socket = null
    this.markOpened()
    if (this.stopped) return
    if (code in FINAL_CLOSES) {
      const [errorCode, message] = FINAL_CLOSES[code]
      this.fail(this.lastError ? null : { type: 'error', code: errorCode, message, closeCode: code })
      return
    }
    this.failures += 1
    const pause = code === TOO_MANY_STREAMS ? 1000 * 2 ** Math.min(this.failures, 5) : this.failures === 1 ? 100 : backoff(this.failures)
    this.timer = setTimeout(() => this.connect(), pause)
  }

  /** The stream cannot go on: say why (unless the studio said it), then stop. */
  fail(event) {
    if (event && !this.dispatch(event)) {
      console.error(`studio-client: the events of agent '${this.name}' stopped: ${event.message}`)
    }
    this.stop()
  }

  /** Hand `event` to its handlers and the catch-all ones; how many heard it. */
  dispatch(event) {
    let heard = 0
    for (const type of [event.type, '*']) {
      for (const handler of [...(this.handlers.get(type) ?? [])]) {
        heard += 1
        try {
          handler(event)
        } catch (error) {
          console.error(`studio-client: a handler of '${type}' events threw`, error)
        }
      }
    }
    return heard
  }
}

async function webSocketClass(given) {
  if (given) return given
  if (globalThis.WebSocket) return globalThis.WebSocket
  try {
    return (await import('ws')).default
  } catch (error) {
    throw new StudioError({
      code: 'websocket_unavailable',
      message:
        'This runtime has no WebSocket: use Node 22 or later, or install the ws package (npm install ws), ' +
        'or pass one as connect({ WebSocket }).',
      cause: error,
    })
  }
}
