// Game code that reconciles: every error of a send carries the send's
// Idempotency-Key (the caller's, or the one the client made), and
// `agent.turnByIdempotencyKey` finds the turn it made — the case of a send
// the studio played to its end while the client saw only a network error.
// And `error.outOfCredits`, one test for each way a game cannot pay.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { OUT_OF_CREDITS, StudioError, connect } from '../index.js'
import { recordingFetch, studio, uniqueName } from './support.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
// Games whose sends are refused for want of credits (tests/clients/test_js_client.py makes them).
const broke = { url: studio.url, key: process.env.STUDIO_BROKE_KEY }
const capped = { url: studio.url, key: process.env.STUDIO_CAPPED_KEY }

/**
 * A fetch whose sends reach the studio and run to their end — the answer
 * is read whole — but whose connection then drops: the client sees a
 * network error where the studio saw a send played.
 */
function answersLost(inner = fetch) {
  const lost = []
  const dropping = async (url, init = {}) => {
    const response = await inner(url, init)
    if (!new URL(url).pathname.endsWith('/messages')) return response
    lost.push({ status: response.status, body: await response.text() })
    throw new TypeError('fetch failed', { cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }) })
  }
  return { fetch: dropping, lost }
}

test('a send the studio played whose answer was lost is found by its key, block and reply', async () => {
  const name = uniqueName('dm')
  const io = connect(studio)
  const dm = new io.Agent(name, { memory: {} })
  for (const message of ['I wake on the shore.', 'I walk to the chapel.']) await dm.send(message)
  const lossy = answersLost()
  const game = connect({ ...studio, fetch: lossy.fetch, retries: 1 })
  const sameDm = new game.Agent(name, { memory: {} })

  let lost = null
  await assert.rejects(sameDm.send('I open the chapel door.'), (error) => {
    lost = error
    return true
  })

  assert.ok(lost instanceof StudioError)
  assert.equal(lost.code, 'network_error')
  assert.equal(lost.status, null)
  assert.match(lost.idempotencyKey, UUID) // the one the client made for this send
  assert.deepEqual(
    lossy.lost.map((answer) => answer.status),
    [200, 200], // the first try and its retry, the same turn both times
  )
  const turn = await sameDm.turnByIdempotencyKey(lost.idempotencyKey)
  assert.equal(turn.status, 'completed')
  assert.equal(turn.block, 3)
  assert.match(turn.reply, /I open the chapel door/)
  assert.deepEqual(turn, JSON.parse(lossy.lost[0].body).turn)
  // Sending again with the key runs nothing more: it answers the same turn.
  assert.equal((await dm.send('I open the chapel door.', { idempotencyKey: lost.idempotencyKey })).id, turn.id)
  const history = []
  for await (const page of dm.history()) history.push(...page.blocks)
  assert.deepEqual(
    history.map((block) => block.block),
    [1, 2, 3],
  )
})

test('a key no send used, another agent\'s key and another game\'s key find no turn', async () => {
  const name = uniqueName('dm')
  const io = connect(studio)
  const dm = new io.Agent(name, {})
  const turn = await dm.send('Hello.', { idempotencyKey: `hello-${name}` })
  const elsewhere = new (connect(broke).Agent)(name, {})
  const innkeeper = new io.Agent(uniqueName('inn'), {})

  assert.equal((await dm.turnByIdempotencyKey(`hello-${name}`)).id, turn.id)
  assert.equal(await dm.turnByIdempotencyKey(`goodbye-${name}`), null)
  assert.equal(await innkeeper.turnByIdempotencyKey(`hello-${name}`), null)
  assert.equal(await elsewhere.turnByIdempotencyKey(`hello-${name}`), null)
  await assert.rejects(dm.turnByIdempotencyKey(''), TypeError)
})

test('every refusal of a send carries the key it was sent with, the caller\'s or the client\'s own', async () => {
  const recording = recordingFetch()
  const io = connect({ ...broke, fetch: recording.fetch })
  const dm = new io.Agent(uniqueName('dm'), {})

  const given = await dm.send('Hello?', { idempotencyKey: 'my-key-1' }).catch((error) => error)
  const made = await dm.send('Hello?').catch((error) => error)

  assert.equal(given.idempotencyKey, 'my-key-1')
  const sent = recording.calls.filter((call) => call.method === 'POST').map((call) => call.idempotencyKey)
  assert.deepEqual(sent, ['my-key-1', made.idempotencyKey])
  assert.match(made.idempotencyKey, UUID)
  assert.equal(await dm.turnByIdempotencyKey(made.idempotencyKey), null) // refused before it ran: sending again is safe
})

test('out of credits is one check, whichever way the game cannot pay', async () => {
  const refusals = []
  for (const game of [broke, capped]) {
    const io = connect(game)
    const dm = new io.Agent(uniqueName('dm'), {})
    refusals.push(await dm.send('Hello?').catch((error) => error))
  }

  assert.deepEqual(
    refusals.map((error) => [error instanceof StudioError, error.status, error.code, error.outOfCredits]),
    [
      [true, 402, 'budget_exhausted', true],
      [true, 402, 'spend_cap_reached', true],
    ],
  )
  assert.deepEqual([...OUT_OF_CREDITS].sort(), ['budget_exhausted', 'insufficient_credits', 'spend_cap_reached'])
  assert.equal(new StudioError({ status: 429, code: 'game_busy', message: 'Busy.' }).outOfCredits, false)
})
