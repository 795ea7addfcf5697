// The studio over HTTP: one request with its key, retried when it is safe
// to (network errors, 429 and 502/503/504, honouring Retry-After), and
// server-sent events read from an answer's body.

import { StudioError, errorOfResponse, retryAfterOf } from './errors.js'

const RETRIED_STATUSES = new Set([429, 502, 503, 504])
// What a request that must not run twice is tried again after: refusals of
// it, made before it ran.
const REFUSED_STATUSES = new Set([429, 503])

export class Http {
  constructor({ url, key, retries, fetch }) {
    this.base = String(url).replace(/\/+$/, '')
    this.key = key
    this.retries = retries
    this.fetch = fetch
  }

  /**
   * The studio's answer to one request, once it is a success; a StudioError
   * otherwise. Every request here is safe to repeat — reads, a definition
   * (the same body), a send (its Idempotency-Key), a cancel — but the ones
   * made with `repeatable: false` (starting a replay), which are tried again
   * only when they certainly did not reach the studio, or it refused them.
   */
  async request(method, path, { query, body, headers = {}, signal, repeatable = true } = {}) {
    const url = this.base + path + queryString(query)
    const init = {
      method,
      headers: {
        Authorization: `Bearer ${this.key}`,
        Accept: 'application/json',
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    }
    for (let attempt = 0; ; attempt += 1) {
      let response
      try {
        response = await this.fetch(url, init)
      } catch (error) {
        if (signal?.aborted) throw signal.reason
        if (!repeatable && !neverSent(error)) {
          throw new StudioError({
            code: 'network_error',
            message:
              `The connection to the studio at ${this.base} failed before it answered (${describe(error)}): ` +
              `${method} ${path} may or may not have been carried out.`,
            cause: error,
          })
        }
        if (attempt >= this.retries) {
          throw new StudioError({
            code: 'network_error',
            message: `The studio at ${this.base} could not be reached (${describe(error)}).`,
            cause: error,
          })
        }
        await sleep(backoff(attempt), signal)
        continue
      }
      if (response.ok) return response
      const retried = repeatable ? RETRIED_STATUSES : REFUSED_STATUSES
      if (retried.has(response.status) && attempt < this.retries) {
        const wait = retryAfterOf(response)
        await response.body?.cancel().catch(() => {})
        await sleep(wait == null ? backoff(attempt) : wait * 1000, signal)
        continue
      }
      throw await errorOfResponse(response)
    }
  }

  /** `request`'s answer as JSON (null for an empty one). */
  async json(method, path, options) {
    const response = await this.request(method, path, options)
    const text = await response.text()
    return text ? JSON.parse(text) : null
  }
}

/**
 * The server-sent events of a `text/event-stream` body, each as
 * `{ event, id, data }` (data as sent: a string). Ends with the body;
 * stopping early cancels it.
 */
export async function* serverSentEvents(body) {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  let done = false
  try {
    while (!done) {
      const chunk = await reader.read()
      done = chunk.done
      buffer += done ? decoder.decode() : decoder.decode(chunk.value, { stream: true })
      let end
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = parseEvent(buffer.slice(0, end))
        buffer = buffer.slice(end + 2)
        if (event) yield event
      }
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {})
  }
}

function parseEvent(block) {
  const event = { event: 'message', id: null, data: null }
  const data = []
  for (const raw of block.split('\n')) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw
    if (!line || line.startsWith(':')) continue // a comment: the studio's keep-alive
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') event.event = value
    else if (field === 'id') event.id = value
    else if (field === 'data') data.push(value)
  }
  if (!data.length) return null
  event.data = data.join('\n')
  return event
}

export function queryString(query) {
  if (!query) return ''
  const pairs = Object.entries(query).filter(([, value]) => value !== undefined && value !== null)
  if (!pairs.length) return ''
  return '?' + new URLSearchParams(pairs.map(([name, value]) => [name, String(value)])).toString()
}

/** Wait `ms`, or less if `signal` aborts (then reject with its reason). */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason)
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** A growing pause between tries: 0.25 s, 0.5 s, 1 s, … up to 8 s. */
export function backoff(attempt) {
  return Math.min(250 * 2 ** attempt, 8000)
}

/** A fetch that failed before the request left: no connection was made. */
function neverSent(error) {
  return ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN'].includes(error?.cause?.code)
}

function describe(error) {
  const cause = error?.cause
  return cause?.code ?? cause?.message ?? error?.message ?? String(error)
}
