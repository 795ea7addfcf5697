// The studio's client for game code: the spec's `new io.Agent(name, options)`,
// then send, stream, listen and read. No dependencies: `fetch` for HTTP, the
// runtime's WebSocket (Node 22+) or the `ws` package for events.

import { Listener } from './lib/events.js'
import { OUT_OF_CREDITS, StudioError } from './lib/errors.js'
import { Http, backoff, serverSentEvents, sleep } from './lib/http.js'
import { optionsCheck } from './lib/options.js'
import { ToolCalls, toolsOf } from './lib/tools.js'

export { OUT_OF_CREDITS, StudioError }

const NAME = /^[A-Za-z0-9_-]{1,64}$/
// What the studio takes when a definition leaves them out.
const DEFAULT_MAX_OPEN_TOKENS = 4000
const DEFAULT_MAX_TOKENS = 32000
// A replay's statuses once it has ended.
const REPLAY_ENDED = new Set(['completed', 'failed', 'cancelled'])
// What a replay being followed listens for: its blocks and its end, and
// word that the stream missed events or stopped (then the studio is asked).
const REPLAY_EVENTS = ['replay.progress', 'replay.finished', 'resync', 'error']
// A replay whose end was read before its `replay.finished` came: how long to
// wait for the events of its last blocks, which may be on their way.
const REPLAY_LATE_EVENTS_MS = 1000
// The last event of a turn's stream that could learn nothing more of it
// (the studio's Redis and database both away): follow the turn again.
const STREAM_INTERRUPTED = 'stream_interrupted'

/**
 * `io` for one studio and one API key: `io.Agent`, the spec's class, and
 * `io.agents`, a plain object for game code to keep its agents in.
 */
export function connect({ url, key, WebSocket, fetch = globalThis.fetch, retries = 5 } = {}) {
  if (!url) throw new TypeError("connect({ url, key }): url is the studio's address, e.g. http://127.0.0.1:8000")
  if (!key) throw new TypeError('connect({ url, key }): key is an API key of the game (sk_…)')
  if (typeof fetch !== 'function') throw new TypeError('connect(): this runtime has no fetch (Node 18 or later has one)')
  const studio = new Studio({ url, key, WebSocket, fetch, retries })

  class Agent extends StudioAgent {
    constructor(name, options, settings) {
      super(studio, name, options, settings)
    }
  }

  return {
    Agent,
    agents: {},
    billing: () => studio.http.json('GET', '/api/v1/billing'),
  }
}

/** What one `io` keeps: its HTTP, the definitions it sent, its listeners. */
class Studio {
  constructor({ url, key, WebSocket, fetch, retries }) {
    this.http = new Http({ url, key, retries, fetch })
    this.WebSocket = WebSocket
    this.definitions = new Map() // name → { signature, ready, heeded }
    this.listeners = new Map() // name → Listener
  }

  /**
   * The agent defined as `options` say, in the background: `{ ready }`, a
   * promise of the studio's answer, and `heeded`, set once game code waits
   * on it. The same options as the last definition of the name (sent, or
   * being sent) send nothing; other options one PUT, after the ones before
   * it. With `ifMatch` (a revision, or its ETag) the PUT is always sent, and
   * the studio refuses it (412 `definition_changed`) if the agent has been
   * defined since that revision.
   */
  define(name, options, { ifMatch } = {}) {
    const signature = stableJson(options)
    const known = this.definitions.get(name)
    if (ifMatch == null && known && known.signature === signature) return known
    const before = known ? known.ready.catch(() => {}) : Promise.resolve()
    const headers = ifMatch == null ? undefined : { 'If-Match': etagOf(ifMatch) }
    const ready = before.then(() => this.http.json('PUT', agentPath(name), { body: options, headers }))
    const entry = { signature, ready, heeded: false }
    this.definitions.set(name, entry)
    // A refused definition is sent again by the next construction; and the
    // refusal is reported by `ready` and by sends, never as unhandled. When
    // nothing waits on it, it is written to stderr: a typo must not pass
    // unseen until the agent's next send.
    ready.catch((error) => {
      if (this.definitions.get(name) === entry) this.definitions.delete(name)
      if (!entry.heeded) console.error(unheededDefinition(name, error))
    })
    return entry
  }

  listen(name, ready, type, handler) {
    let listener = this.listeners.get(name)
    if (!listener) {
      listener = new Listener({
        url: this.http.base,
        key: this.http.key,
        name,
        ready,
        WebSocket: this.WebSocket,
        onStop: () => {
          if (this.listeners.get(name) === listener) this.listeners.delete(name)
        },
      })
      this.listeners.set(name, listener)
    }
    return listener.add(type, handler)
  }

  /** Settles once the agent's listener, if it has one, is connected (or failed). */
  listening(name) {
    return this.listeners.get(name)?.opened
  }
}

class StudioAgent {
  #studio
  #tools // the game's tools' handlers, by name
  #definition // { ready, heeded }: the studio's answer to the definition

  constructor(studio, name, options = {}, { ifMatch } = {}) {
    nameCheck(name)
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new TypeError(`new io.Agent('${name}', options): options must be an object`)
    }
    optionsCheck(name, options)
    definitionCheck(options)
    ifMatchCheck(name, ifMatch)
    const { tools, ...definition } = options
    const { definitions, handlers } = toolsOf(name, tools)
    if (definitions) definition.tools = definitions
    this.#studio = studio
    this.#tools = handlers
    this.name = name
    this.options = options
    // The revision of the agent's config the studio answered the definition
    // with (and its ETag, for `ifMatch`); null until `ready` resolves.
    this.revision = null
    this.etag = null
    this.#definition = studio.define(name, definition, { ifMatch })
    this.#definition.ready.then(
      (agent) => {
        this.revision = agent?.revision?.number ?? null
        this.etag = this.revision == null ? null : etagOf(this.revision)
      },
      () => {}, // reported by `ready` and by sends
    )
  }

  /**
   * The studio's answer to the definition: the agent, or its StudioError.
   * A refusal nothing waits on (no `await agent.ready`, no send) is written
   * to stderr, and is the next send's error.
   */
  get ready() {
    this.#definition.heeded = true
    return this.#definition.ready
  }

  get #path() {
    return agentPath(this.name)
  }

  get #http() {
    return this.#studio.http
  }

  /**
   * Send the player's message; the turn once it has ended. With `onText` the
   * reply streams, each piece handed to it as it is written. Every send
   * carries an Idempotency-Key, so its retries never run a second turn. The
   * calls the turn makes of the game's tools that have a `run` here are run
   * and answered on the way.
   */
  async send(content, { transient = false, onText, signal, idempotencyKey } = {}) {
    this.#definition.heeded = true // its refusal is this send's error
    signal?.throwIfAborted()
    const send = { body: { content, transient }, key: idempotencyKey ?? (await newKey()) }
    try {
      await this.#definition.ready
    } catch (error) {
      throw keyed(error, send.key, { copy: true }) // shared by every send until it is defined again
    }
    let calls = null
    try {
      await this.#studio.listening(this.name) // so `on` handlers hear this send
      signal?.throwIfAborted()
      calls = this.#tools.size ? new ToolCalls({ http: this.#http, path: this.#path, handlers: this.#tools, signal }) : null
      // With a signal the send streams too: the turn's id comes first, to cancel it by.
      if (onText || signal) return await this.#sendStreamed(send, onText, signal, calls)
      return await this.#sendWaiting(send, calls)
    } catch (error) {
      // Every error of a send carries its key: `turnByIdempotencyKey` tells whether it ran.
      throw keyed(error, send.key)
    } finally {
      calls?.end()
    }
  }

  /**
   * The turn the send under `key` made (a failed send's
   * `error.idempotencyKey`), as the studio has it now — how game code
   * reconciles a `network_error`: the turn ran (its `status`, `block` and
   * `reply`), or it is null and no send under that key reached the studio
   * or ran, so sending again with the same key is safe.
   */
  async turnByIdempotencyKey(key) {
    if (typeof key !== 'string' || !key) {
      throw new TypeError("agent.turnByIdempotencyKey(key): key is a send's Idempotency-Key (error.idempotencyKey)")
    }
    await settled(this.#definition.ready)
    const { turns } = await this.#http.json('GET', `${this.#path}/turns`, { query: { idempotencyKey: key, limit: 1 } })
    return turns[0] ?? null
  }

  async #sendWaiting(send, calls) {
    for (let attempt = 0; ; attempt += 1) {
      const response = await this.#http.request('POST', `${this.#path}/messages`, {
        body: send.body,
        headers: { 'Idempotency-Key': send.key },
      })
      let answer
      try {
        answer = await response.json()
      } catch (error) {
        if (!isNetworkError(error)) throw error
        await this.#pauseBeforeRetry(attempt) // the answer broke off: ask again for the same turn
        continue
      }
      if (response.status !== 202) return answer.turn
      // Not ended: it waits for the game's tools, or enough repeats wait on it already.
      const { id, pendingToolCalls = [] } = answer.turn
      for (const call of pendingToolCalls) calls?.requested({ turnId: id, ...call })
      return this.#follow(id, calls)
    }
  }

  async #sendStreamed(send, onText, signal, calls) {
    const stream = newStream({ onText, calls })
    try {
      for (let attempt = 0; ; attempt += 1) {
        // Once the studio said it could not follow the turn, its events are
        // followed by the turn's id; else the same key follows the same turn.
        const response = stream.follow
          ? await this.#turnEvents(stream.turnId, signal)
          : await this.#http.request('POST', `${this.#path}/messages`, {
              body: { ...send.body, stream: true },
              headers: { 'Idempotency-Key': send.key, Accept: 'text/event-stream' },
              signal,
            })
        const turn = await readTurn(response, stream)
        if (turn) return turn
        // The stream broke off: what was heard already is skipped.
        await this.#pauseBeforeRetry(attempt, signal, stream)
      }
    } catch (error) {
      if (!signal?.aborted) throw error
      // Aborted before the studio answered, the send may still have reached
      // it (its turn running, its answer on the way): the key finds it.
      await this.#cancel(stream.turnId, send)
      throw signal.reason
    }
  }

  /** The turn a 202 named, followed to its end. */
  async #follow(turnId, calls) {
    const stream = newStream({ turnId, calls })
    for (let attempt = 0; ; attempt += 1) {
      const turn = await readTurn(await this.#turnEvents(turnId), stream)
      if (turn) return turn
      await this.#pauseBeforeRetry(attempt, undefined, stream)
    }
  }

  /** `GET …/turns/{id}/events`: the turn's events again, then the live ones, to `turn.finished`. */
  #turnEvents(turnId, signal) {
    return this.#http.request('GET', `${this.#path}/turns/${encodeURIComponent(turnId)}/events`, {
      headers: { Accept: 'text/event-stream' },
      signal,
    })
  }

  async #pauseBeforeRetry(attempt, signal, stream) {
    if (attempt >= this.#http.retries) {
      const said = stream?.interrupted ? ` The studio's last word: ${stream.interrupted.message}` : ''
      throw new StudioError({
        code: 'network_error',
        message: `The studio's answer broke off ${attempt + 1} times before the turn ended.${said}`,
      })
    }
    await sleep(backoff(attempt), signal)
  }

  /** After an abort: cancel the turn, if it is known to exist (best effort). */
  async #cancel(turnId, send) {
    try {
      if (!turnId && send) {
        // Not heard of yet (queued, or its answer still on the way): the same
        // key names it, and waits for nothing. Had the send never arrived,
        // this makes its turn, cancelled at once.
        const answer = await this.#http.json('POST', `${this.#path}/messages`, {
          body: { ...send.body, wait: false },
          headers: { 'Idempotency-Key': send.key },
        })
        turnId = answer.turn.id
      }
      if (turnId) await this.#http.request('POST', `${this.#path}/turns/${turnId}/cancel`)
    } catch {
      // It ended meanwhile (409), or the studio is out of reach: it runs to its end.
    }
  }

  /**
   * Hear the agent's events of `type` (`'*'`: every one) as they happen;
   * returns `off()`. Events resume after a dropped connection, none lost or
   * repeated.
   */
  on(type, handler) {
    if (typeof type !== 'string' || !type) throw new TypeError("agent.on(type, handler): type is an event type, or '*'")
    if (typeof handler !== 'function') throw new TypeError('agent.on(type, handler): handler must be a function')
    return this.#studio.listen(this.name, this.#definition.ready, type, handler)
  }

  /** The memory store: `{ memories, openTokens, maxOpenTokens, storeBytes, storeCapBytes, … }`. */
  async memories({ atBlock, limit, cursor } = {}) {
    await settled(this.#definition.ready)
    return this.#http.json('GET', `${this.#path}/memories`, { query: { atBlock, limit, cursor } })
  }

  /** What the next model call would be given (or, with atBlock, what that block's was). */
  async context({ atBlock } = {}) {
    await settled(this.#definition.ready)
    return this.#http.json('GET', `${this.#path}/context`, { query: { atBlock } })
  }

  /** The turn's cost as charged now: `{ total, lines }`. */
  async cost(turn) {
    const id = typeof turn === 'string' ? turn : turn?.id
    if (!id) throw new TypeError('agent.cost(turn): pass a turn (or its id)')
    await settled(this.#definition.ready)
    const answer = await this.#http.json('GET', `${this.#path}/turns/${encodeURIComponent(id)}`)
    return answer.turn.cost
  }

  /**
   * Replay the player's messages of blocks `fromBlock`..`through` (default:
   * the newest ended block) on a copy of the agent as it stood before them,
   * its definition changed by `definition`; resolves once the replay has
   * ended, with the replay as the studio shows it (a row per block, the
   * stores compared). `onProgress` hears each block played (the
   * `replay.progress` event); aborting `signal` cancels the replay.
   */
  async replay({ fromBlock, definition, through } = {}, { onProgress, signal } = {}) {
    signal?.throwIfAborted()
    await this.ready
    const inbox = new Inbox()
    const offs = REPLAY_EVENTS.map((type) => this.on(type, (event) => inbox.push(event)))
    try {
      await this.#studio.listening(this.name) // so it hears the replay's first block
      signal?.throwIfAborted()
      const body = Object.fromEntries(
        Object.entries({ fromBlock, definition, through }).filter(([, value]) => value != null),
      )
      // Never sent twice: a second start would be refused (one replay at a
      // time) while the first one runs unheard.
      const { replay } = await this.#http.json('POST', `${this.#path}/replays`, { body, repeatable: false })
      try {
        return await this.#replayFollowed(replay, inbox, onProgress, signal)
      } catch (error) {
        if (!signal?.aborted) throw error
        await this.#replayCancel(replay.id)
        throw signal.reason
      }
    } finally {
      for (const off of offs) off()
    }
  }

  /**
   * The replay followed to its end: told by the event stream, and asked of
   * the studio when the stream says it ended (or missed events, or
   * stopped), and now and then when it says nothing.
   */
  async #replayFollowed(replay, inbox, onProgress, signal) {
    const read = async () => (await this.#http.json('GET', `${this.#path}/replays/${replay.id}`)).replay
    let finished = false // its replay.finished came
    let late = false // waited for its last events already
    for (let quiet = 0; ; ) {
      let ask = false
      for (const event of inbox.take()) {
        if (event.type.startsWith('replay.') && event.replayId !== replay.id) continue // another replay's
        if (event.type === 'replay.progress') {
          onProgress?.(event)
        } else {
          finished ||= event.type === 'replay.finished'
          ask = true
        }
      }
      if (ask) replay = await read()
      const ended = REPLAY_ENDED.has(replay.status)
      if (ended && (finished || late)) return replay
      // Not ended: quiet for 1 s, 2 s, 4 s … 15 s, the studio is asked, in
      // case the stream cannot tell. Ended, but its end read first: its last
      // events may be on their way.
      late = ended
      if (await inbox.wait(ended ? REPLAY_LATE_EVENTS_MS : Math.min(1000 * 2 ** quiet, 15_000), signal)) continue
      if (!ended) {
        quiet += 1
        replay = await read()
      }
    }
  }

  /** After an abort: cancel the replay (best effort; it may have ended meanwhile). */
  async #replayCancel(id) {
    try {
      await this.#http.request('POST', `${this.#path}/replays/${encodeURIComponent(id)}/cancel`)
    } catch {
      // It ended meanwhile (409), or the studio is out of reach: it runs to its end.
    }
  }

  /** The agent's replays, newest first, a page: `{ replays, nextCursor }` (without rows). */
  async replays({ limit, cursor } = {}) {
    await settled(this.#definition.ready)
    return this.#http.json('GET', `${this.#path}/replays`, { query: { limit, cursor } })
  }

  /** The agent's history, oldest block first, a page at a time: `for await (const page of agent.history())`. */
  async *history({ after, limit } = {}) {
    await settled(this.#definition.ready)
    let query = { after, limit }
    for (;;) {
      const page = await this.#http.json('GET', `${this.#path}/history`, { query })
      yield page
      if (!page.nextCursor) return
      query = { cursor: page.nextCursor, limit }
    }
  }
}

/** What one send (or one turn followed) has heard of its turn, across every try. */
function newStream({ turnId = null, onText = null, calls = null }) {
  return {
    lastSeq: null,
    turnId,
    onText,
    onEvent: calls && ((type, event) => calls.heard(type, event)),
    interrupted: null, // the studio's `stream_interrupted`, once it said it
    textHeard: '', // the reply's pieces handed to onText so far
    follow: false, // tries from then on follow `GET …/turns/{id}/events`
  }
}

/**
 * The turn a `text/event-stream` answer ends with (`turn.finished`), or null
 * when it broke off first — or ended with `stream_interrupted`: the studio
 * could learn nothing more of the turn (its Redis and its database away),
 * and says to follow it again at `GET …/turns/{id}/events` (then
 * `stream.follow`). `stream.onText` hears each piece of the reply,
 * `stream.onEvent` every event before the last; events up to
 * `stream.lastSeq` were heard before and are skipped.
 */
async function readTurn(response, stream) {
  try {
    for await (const message of serverSentEvents(response.body)) {
      const event = JSON.parse(message.data)
      if (message.event === 'turn.finished') {
        try {
          replyRest(stream, event.turn)
        } catch (error) {
          throw new HandlerError(error)
        }
        return event.turn
      }
      if (message.event === 'error' && event.code === STREAM_INTERRUPTED) {
        stream.interrupted = event
        stream.turnId ??= turnIdIn(event.message)
        // Without the turn's id (neither heard nor said), the send's key finds it again.
        stream.follow = stream.turnId != null
        return null
      }
      if (message.event === 'error') {
        throw new StudioError({ code: event.code, message: event.message })
      }
      if (typeof event.seq === 'number') {
        if (stream.lastSeq != null && event.seq <= stream.lastSeq) continue
        stream.lastSeq = event.seq
      }
      if (event.turnId) stream.turnId = event.turnId
      stream.onEvent?.(message.event, event)
      if (message.event === 'reply.delta' && stream.onText) {
        stream.textHeard += event.text
        try {
          stream.onText(event.text, event)
        } catch (error) {
          throw new HandlerError(error)
        }
      }
    }
  } catch (error) {
    if (error instanceof HandlerError) throw error.error // the game's own, as it threw it
    if (error instanceof StudioError || error?.name === 'AbortError' || !isNetworkError(error)) throw error
  }
  return null
}

/**
 * At the turn's end, the rest of its reply no `reply.delta` brought (a try
 * that followed the turn after its words had left the studio's buffer) is
 * handed to `onText`, so the pieces it heard add up to the whole reply, each once.
 */
function replyRest(stream, turn) {
  const reply = turn?.reply ?? ''
  if (!stream.onText || reply.length <= stream.textHeard.length || !reply.startsWith(stream.textHeard)) return
  const text = reply.slice(stream.textHeard.length)
  stream.textHeard = reply
  stream.onText(text, { type: 'reply.delta', turnId: turn.id, text })
}

/** The turn's id in a `stream_interrupted` message, which names `GET /api/v1/agents/{name}/turns/{id}/events`. */
function turnIdIn(message) {
  const found = /\/turns\/([^/\s]+)\/events/.exec(String(message ?? ''))
  return found ? decodeURIComponent(found[1]) : null
}

/** Events as a listener hands them on, kept until a loop takes them. */
class Inbox {
  #events = []
  #wake = null

  push(event) {
    this.#events.push(event)
    this.#wake?.()
  }

  take() {
    return this.#events.splice(0)
  }

  /** True once an event is there; false after `ms` without one; rejects when `signal` aborts. */
  wait(ms, signal) {
    if (this.#events.length) return Promise.resolve(true)
    return new Promise((resolve, reject) => {
      const end = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        this.#wake = null
      }
      const onAbort = () => {
        end()
        reject(signal.reason)
      }
      const timer = setTimeout(() => {
        end()
        resolve(false)
      }, ms)
      this.#wake = () => {
        end()
        resolve(true)
      }
      if (signal?.aborted) onAbort()
      else signal?.addEventListener('abort', onAbort, { once: true })
    })
  }
}

/** What `onText` threw, carried past the network errors a stream retries on. */
class HandlerError {
  constructor(error) {
    this.error = error
  }
}

/**
 * A send's error with its Idempotency-Key on it: the same error, or (with
 * `copy`, for one that others share) a copy with the key. What is not the
 * studio's (the game's own, an abort's reason) is left as it is.
 */
function keyed(error, key, { copy = false } = {}) {
  if (!(error instanceof StudioError)) return error
  if (!copy) {
    error.idempotencyKey = key
    return error
  }
  const { status, code, message, details, retryAfter } = error
  return new StudioError({ status, code, message, details, retryAfter, idempotencyKey: key, cause: error })
}

/** What stderr is told of a definition that failed while nothing waited on it. */
function unheededDefinition(name, error) {
  const said = error instanceof StudioError ? `(${error.code}): ${error.message}` : `: ${error?.message ?? error}`
  return (
    `studio-client: the definition of agent '${name}' failed ${said} Nothing awaited the agent's ` +
    '`ready`, so it is reported here; its next send rejects with this error.'
  )
}

function isNetworkError(error) {
  // What fetch's body raises when the connection drops mid-answer.
  return error instanceof TypeError || error?.code === 'ECONNRESET' || error?.code === 'UND_ERR_SOCKET'
}

function nameCheck(name) {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new StudioError({
      status: 400,
      code: 'invalid_name',
      message: `'${String(name).slice(0, 80)}' is not a valid agent name: use 1–64 characters from A–Z, a–z, 0–9, '_' and '-'.`,
    })
  }
  if (name === 'import') {
    throw new StudioError({
      status: 400,
      code: 'invalid_name',
      message: "'import' is not an agent name: /agents/import is the import route. Choose another name.",
    })
  }
}

/**
 * The spec's definition-time rule, checked as the studio checks it and in
 * its words: with memory on, maxOpenTokens must be below half of the
 * compaction's maxTokens. The rest (the model, the system prompt's room)
 * only the studio knows: `ready` rejects with its answer.
 */
function definitionCheck(options) {
  const { memory, compaction } = options
  if (memory === null || memory === undefined || typeof memory !== 'object') return
  const maxOpen = memory.maxOpenTokens ?? DEFAULT_MAX_OPEN_TOKENS
  const maxTokens = compaction?.maxTokens ?? DEFAULT_MAX_TOKENS
  // Values the studio refuses for their own sake are its to word.
  if (!inRange(maxOpen, 1) || !inRange(maxTokens, 256)) return
  const largest = Math.floor((maxTokens - 1) / 2)
  if (maxOpen > largest) {
    throw new StudioError({
      status: 400,
      code: 'invalid_definition',
      message:
        `memory.maxOpenTokens (${grouped(maxOpen)}) must be below half of compaction.maxTokens ` +
        `(${grouped(maxTokens)}), so ${grouped(largest)} at most. Lower memory.maxOpenTokens to ` +
        `${grouped(largest)} or raise compaction.maxTokens to ${grouped(maxOpen * 2 + 1)}.`,
    })
  }
}

function inRange(value, least) {
  return Number.isInteger(value) && value >= least && value <= 10_000_000
}

function grouped(number) {
  return String(number).replace(/\B(?=(\d{3})+(?!\d))/g, ',')
}

/** An If-Match value: a revision (3 → `"3"`), an ETag as the studio sent it, or `*`. */
function etagOf(ifMatch) {
  if (typeof ifMatch === 'number') return `"${ifMatch}"`
  return ifMatch === '*' || ifMatch.startsWith('"') || ifMatch.startsWith('W/') ? ifMatch : `"${ifMatch}"`
}

function ifMatchCheck(name, ifMatch) {
  if (ifMatch == null) return
  if ((Number.isInteger(ifMatch) && ifMatch >= 1) || (typeof ifMatch === 'string' && ifMatch.trim())) return
  throw new TypeError(
    `new io.Agent('${name}', options, { ifMatch }): ifMatch is a revision (agent.revision, a whole number) ` +
      `or its ETag (agent.etag); got ${JSON.stringify(ifMatch)}`,
  )
}

function agentPath(name) {
  return `/api/v1/agents/${encodeURIComponent(name)}`
}

/** JSON with every object's keys in order: equal options, equal text. */
function stableJson(value) {
  return JSON.stringify(value, (_, item) =>
    item && typeof item === 'object' && !Array.isArray(item)
      ? Object.fromEntries(Object.keys(item).sort().map((name) => [name, item[name]]))
      : item,
  )
}

function settled(promise) {
  return promise.then(
    () => {},
    () => {},
  )
}

async function newKey() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID()
  return (await import('node:crypto')).randomUUID() // Node 18 without the global
}
