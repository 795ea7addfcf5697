// The game's own tools: declared with the agent (`tools`), run here when a
// turn this client sent calls one, and answered to the studio
// (`POST …/turns/{id}/tool-results`).

import { StudioError } from './errors.js'

// A thrown error's message is the model's to read: this much of it.
const ERROR_MAX_CHARS = 4000

/**
 * `options.tools` — `{ give_item: { description, parameters, timeoutSeconds, run } }` —
 * as a definition sends them (`[{ name, description, parameters, timeoutSeconds }]`,
 * in the order given, without `run`), and the handlers by name. Only the
 * shape the client needs is checked here: names, schemas and bounds are
 * the studio's to check (`ready` rejects with its answer).
 */
export function toolsOf(agentName, tools) {
  const handlers = new Map()
  if (tools === undefined || tools === null) return { definitions: undefined, handlers }
  if (typeof tools !== 'object' || Array.isArray(tools)) {
    throw new TypeError(
      `new io.Agent('${agentName}', { tools }): tools is an object of the game's tools by name, ` +
        '{ give_item: { description, parameters, run } }',
    )
  }
  const definitions = []
  for (const [name, tool] of Object.entries(tools)) {
    if (tool === null || typeof tool !== 'object' || Array.isArray(tool)) {
      throw new TypeError(
        `new io.Agent('${agentName}', { tools }): tools.${name} must be an object, { description, parameters, run }`,
      )
    }
    const { run, ...definition } = tool
    if (run !== undefined && typeof run !== 'function') {
      throw new TypeError(
        `new io.Agent('${agentName}', { tools }): tools.${name}.run must be a function, (args, context) => result`,
      )
    }
    definitions.push({ name, ...definition })
    if (run) handlers.set(name, run)
  }
  return { definitions, handlers }
}

/**
 * The game's tool calls of one send: each `tool.requested` with a handler
 * here is run once (by its `callId`, however often it is heard) and
 * answered; one without is left to other game code, or its deadline. A
 * handler's `signal` aborts when the send is aborted, when the call is
 * answered without it (its deadline passed, other game code answered), or
 * when the turn ends.
 */
export class ToolCalls {
  #http
  #path
  #handlers
  #signal
  #calls = new Map() // callId → { controller, posting, done }

  constructor({ http, path, handlers, signal }) {
    this.#http = http
    this.#path = path
    this.#handlers = handlers
    this.#signal = signal
  }

  /** An event of the turn's stream. */
  heard(type, event) {
    if (type === 'tool.requested') this.requested(event)
    else if (type === 'tool.answered') this.#answeredElsewhere(event)
    else if (type === 'turn.finished') this.end()
  }

  /** A call the turn waits on: `{ turnId, callId, name, arguments, deadline }`. */
  requested(call) {
    if (this.#calls.has(call.callId)) return // heard already (a 202's pendingToolCalls, then its event)
    const run = this.#handlers.get(call.name)
    const entry = { controller: new AbortController(), posting: false, done: !run }
    this.#calls.set(call.callId, entry)
    if (!run) return // not this client's to answer
    const aborted = () => entry.controller.abort(this.#signal.reason)
    if (this.#signal?.aborted) aborted()
    else this.#signal?.addEventListener('abort', aborted, { once: true })
    this.#run(call, run, entry).finally(() => {
      entry.done = true
      this.#signal?.removeEventListener('abort', aborted)
    })
  }

  /** The turn has ended: whatever still runs is no longer waited for. */
  end() {
    for (const entry of this.#calls.values()) {
      if (!entry.done && !entry.controller.signal.aborted) {
        entry.controller.abort(new DOMException('The turn ended before this call was answered.', 'AbortError'))
      }
    }
  }

  async #run(call, run, entry) {
    const { signal } = entry.controller
    const context = { signal, turnId: call.turnId, callId: call.callId, name: call.name, deadline: call.deadline }
    let answer
    try {
      const args = call.cut?.arguments === undefined ? call.arguments : await this.#wholeArguments(call, signal)
      if (args === undefined) return // not waited on any more: answered elsewhere, or the turn ended
      answer = resultOf(call.name, await run(args ?? {}, context))
    } catch (error) {
      answer = { error: errorText(call.name, error) }
    }
    if (signal.aborted) return // answered without it, or the turn ended
    entry.posting = true
    await this.#answer(call, answer)
  }

  /**
   * A call's arguments whole: `tool.requested` cuts long ones (its `cut`
   * says so), the turn's `pendingToolCalls` carry them whole. Undefined
   * when the turn waits on the call no more.
   */
  async #wholeArguments(call, signal) {
    const path = `${this.#path}/turns/${encodeURIComponent(call.turnId)}`
    const { turn } = await this.#http.json('GET', path, { signal })
    const pending = (turn.pendingToolCalls ?? []).find((waiting) => waiting.callId === call.callId)
    return pending?.arguments
  }

  #answeredElsewhere(event) {
    const entry = this.#calls.get(event.callId)
    if (!entry || entry.posting || entry.done || entry.controller.signal.aborted) return
    const how = event.by === 'deadline' ? 'its deadline passed' : event.by === 'turn_ended' ? 'its turn ended' : 'it was answered by other game code'
    entry.controller.abort(new DOMException(`The call was not waited for any more: ${how}.`, 'AbortError'))
  }

  async #answer(call, answer) {
    const path = `${this.#path}/turns/${encodeURIComponent(call.turnId)}/tool-results`
    try {
      await this.#http.request('POST', path, { body: { callId: call.callId, ...answer } })
    } catch (error) {
      if (error instanceof StudioError && error.status === 409) return // answered already, or the turn ended
      if (error instanceof StudioError && (error.status === 400 || error.status === 413) && !('error' in answer)) {
        // A result the studio will not keep (too long, …): the model reads
        // why, rather than wait for the deadline.
        await this.#answer(call, { error: errorText(call.name, `The game's result could not be kept: ${error.message}`) })
        return
      }
      console.error(`studio-client: the answer to ${call.name} (${call.callId}) could not be sent: ${error.message}`)
    }
  }
}

/** What a handler resolved with, as an answer: text as it is, anything else as JSON. */
function resultOf(name, value) {
  if (value === undefined || value === null) return { result: 'null' } // what JSON null reads as
  if (typeof value === 'string') return { result: value }
  let json
  try {
    json = JSON.stringify(value)
  } catch (error) {
    return { error: errorText(name, `The game's result is not JSON: ${error.message}`) }
  }
  if (json === undefined) return { error: errorText(name, `The game's result is not JSON (a ${typeof value}).`) }
  return { result: value }
}

/** A thrown error as the sentence the model reads. */
function errorText(name, error) {
  let text
  try {
    text = error instanceof Error ? error.message : String(error)
  } catch {
    text = ''
  }
  if (!text || !text.trim()) text = `${name} failed${error?.name ? ` (${error.name})` : ''}.`
  return text.length > ERROR_MAX_CHARS ? `${text.slice(0, ERROR_MAX_CHARS - 1)}…` : text
}
