// A turn's stream that ends with `stream_interrupted` — the studio could
// learn nothing more of the turn while its Redis and its database were both
// away — is followed again at `GET …/turns/{id}/events`: the send resolves
// with its turn, never runs twice, and hears no piece twice. The studio is
// real; the interruption is made on the way (a fetch that ends the studio's
// stream with the studio's own `stream_interrupted` event, as
// tests/clients/test_js_client.py passes it in STUDIO_STREAM_INTERRUPTED).

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { raw, recordingFetch, script, studio, uniqueName } from './support.js'

const INTERRUPTED = process.env.STUDIO_STREAM_INTERRUPTED
if (!INTERRUPTED) {
  throw new Error(
    "STUDIO_STREAM_INTERRUPTED is the studio's stream_interrupted event (agents/sending/sse.py), with " +
      '__agent__ and __turn__ for the agent and the turn: tests/clients/test_js_client.py sets it.',
  )
}

/** The studio's `stream_interrupted` event for the agent's turn, as server-sent event text. */
function interruptedEvent(agent, turnId) {
  const data = INTERRUPTED.replaceAll('__agent__', agent).replaceAll('__turn__', turnId)
  return `event: error\ndata: ${data}\n\n`
}

/**
 * A fetch that ends the next `times` event streams matching `which(method,
 * path)` with `stream_interrupted`: after passing on the studio's events up
 * to the first `after` event (null: passing on none), it sends the studio's
 * own interruption event for the turn and ends the answer. `inner` makes the requests.
 */
function interruptingFetch({ which, after, times = 1, inner = fetch }) {
  return async (url, init = {}) => {
    const response = await inner(url, init)
    const { pathname } = new URL(url)
    const streamed = (response.headers.get('content-type') ?? '').startsWith('text/event-stream')
    if (!streamed || !which(init.method ?? 'GET', pathname) || times <= 0) return response
    times -= 1
    const agent = decodeURIComponent(pathname.split('/')[4])
    const reader = response.body.getReader()
    const decoder = new TextDecoder()
    const encoder = new TextEncoder()
    let buffer = ''
    let turnId = null
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read()
        if (done) return controller.close() // the turn ended before the interruption was due
        buffer += decoder.decode(value, { stream: true })
        let end
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const text = buffer.slice(0, end + 2)
          buffer = buffer.slice(end + 2)
          const type = /^event: (.*)$/m.exec(text)?.[1]
          const data = /^data: (.*)$/m.exec(text)?.[1]
          turnId ??= data ? (JSON.parse(data).turnId ?? null) : null
          if (after != null) controller.enqueue(encoder.encode(text))
          if (turnId && (after == null || type === after)) {
            controller.enqueue(encoder.encode(interruptedEvent(agent, turnId)))
            await reader.cancel()
            controller.close()
            return
          }
        }
      },
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }
}

const streamedSend = (method, path) => method === 'POST' && path.endsWith('/messages')
const turnEvents = (method, path) => method === 'GET' && path.endsWith('/events')

function requestsOf(calls) {
  return calls.map((made) => [made.method, made.path.split('/').at(-1), made.status])
}

async function turnsOf(agent) {
  return (await raw('GET', `/api/v1/agents/${agent.name}/turns`)).body.turns
}

test('a streamed send interrupted after its first piece is followed at its events URL: one turn, each piece once', async () => {
  const recording = recordingFetch(interruptingFetch({ which: streamedSend, after: 'reply.delta' }))
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})
  await agent.ready
  const pieces = []

  const turn = await agent.send(script({ say: 'The bells ring twice.', sleep: 0.2 }), {
    onText: (text) => pieces.push(text),
  })

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'The bells ring twice.')
  assert.equal(pieces.join(''), turn.reply)
  // Sent once; then the turn's events, by its id.
  assert.deepEqual(requestsOf(recording.calls.slice(1)), [
    ['POST', 'messages', 200],
    ['GET', 'events', 200],
  ])
  assert.equal(recording.calls[2].path, `/api/v1/agents/${agent.name}/turns/${turn.id}/events`)
  assert.deepEqual(
    (await turnsOf(agent)).map((made) => made.id),
    [turn.id],
  )
})

test('interrupted before any event, a streamed send finds its turn in the message and follows it', async () => {
  const recording = recordingFetch(interruptingFetch({ which: streamedSend, after: null }))
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})
  await agent.ready
  const pieces = []

  const turn = await agent.send(script({ sleep: 0.2 }, { say: 'Late, but whole.' }), {
    onText: (text) => pieces.push(text),
  })

  assert.equal(turn.reply, 'Late, but whole.')
  assert.equal(pieces.join(''), turn.reply)
  assert.deepEqual(requestsOf(recording.calls.slice(1)), [
    ['POST', 'messages', 200],
    ['GET', 'events', 200],
  ])
  assert.equal((await turnsOf(agent)).length, 1)
})

test('a turn followed after a 202 and interrupted is followed again', async () => {
  let once = 1
  // The studio is asked not to wait (as it answers a repeat when enough wait on the turn).
  const answeringAtOnce = (url, init = {}) => {
    if (init.method === 'POST' && url.endsWith('/messages') && once-- > 0) {
      init = { ...init, body: JSON.stringify({ ...JSON.parse(init.body), wait: false }) }
    }
    return fetch(url, init)
  }
  const recording = recordingFetch(interruptingFetch({ which: turnEvents, after: 'turn.started', inner: answeringAtOnce }))
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})
  await agent.ready

  const turn = await agent.send(script({ sleep: 0.3 }, { say: 'Later.' }))

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Later.')
  assert.deepEqual(requestsOf(recording.calls.slice(1)), [
    ['POST', 'messages', 202],
    ['GET', 'events', 200],
    ['GET', 'events', 200],
  ])
  assert.equal((await turnsOf(agent)).length, 1)
})

test('a turn the studio never gets to follow again is a network_error once the retries are spent; it ran once', async () => {
  const either = (method, path) => streamedSend(method, path) || turnEvents(method, path)
  const recording = recordingFetch(interruptingFetch({ which: either, after: 'turn.started', times: 99 }))
  const io = connect({ ...studio, fetch: recording.fetch, retries: 2 })
  const agent = new io.Agent(uniqueName('dm'), {})
  await agent.ready

  let failure
  await assert.rejects(agent.send(script({ sleep: 0.3 }, { say: 'Unheard.' }), { onText: () => {} }), (error) => {
    failure = error
    return error instanceof StudioError && error.code === 'network_error'
  })

  assert.match(failure.message, /stream_interrupted|can no longer follow/)
  assert.ok(failure.idempotencyKey)
  // One send; then the turn's events, as often as the retries allow.
  assert.deepEqual(requestsOf(recording.calls.slice(1)), [
    ['POST', 'messages', 200],
    ['GET', 'events', 200],
    ['GET', 'events', 200],
  ])
  const ran = await agent.turnByIdempotencyKey(failure.idempotencyKey)
  assert.equal(ran.id, (await turnsOf(agent))[0].id)
  assert.equal((await turnsOf(agent)).length, 1)
})
