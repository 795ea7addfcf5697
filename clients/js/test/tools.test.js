// The game's own tools: declared with the agent, run here when the
// character calls one and answered, the send resolving when the turn ends;
// a handler that throws, a call left to its deadline, a handler told the
// deadline passed, two calls of one step answered out of order, an abort
// while a handler runs, a turn cancelled elsewhere, a result the studio will
// not keep.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { connect } from '../index.js'
import { call, eventually, raw, recordingFetch, script, severalCallsModel, studio, uniqueName } from './support.js'

const GIVE = {
  description: "Hand the player an item from the innkeeper's stock.",
  parameters: { type: 'object', properties: { item: { type: 'string' } }, required: ['item'] },
}
const PURSE = { description: 'How much gold the player carries.', parameters: { type: 'object' } }
const HANDING = script(call('give_item', { item: 'key' }), { say: 'Here.' })

function innkeeper(tools, options = {}) {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('inn'), { systemPrompt: 'You keep the inn.', tools, ...options })
  return { agent, io, calls: recording.calls }
}

const answersOf = (calls) => calls.filter((made) => made.path.endsWith('/tool-results'))
const shown = (turn) => turn.toolCalls.map((made) => [made.name, made.result, made.isError])

test('a call of a game tool is run by its handler and answered; the send resolves when the turn ends', async () => {
  const inventory = []
  const contexts = []
  const { agent, calls } = innkeeper({
    give_item: {
      ...GIVE,
      run: async (args, context) => {
        contexts.push(context)
        inventory.push(args.item)
        return { given: args.item }
      },
    },
  })

  const turn = await agent.send(HANDING)

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Here.')
  assert.deepEqual(
    turn.toolCalls.map((made) => [made.name, made.arguments, made.result, made.isError]),
    [['give_item', { item: 'key' }, '{"given": "key"}', false]],
  )
  assert.deepEqual(inventory, ['key'])
  const [context] = contexts
  assert.equal(context.turnId, turn.id)
  assert.equal(context.name, 'give_item')
  assert.match(context.callId, /\S/)
  assert.ok(!Number.isNaN(Date.parse(context.deadline)), context.deadline)
  assert.equal(context.signal.aborted, false)
  // The studio has the tools as declared, without `run`; its 202 did not end the send.
  assert.deepEqual((await raw('GET', `/api/v1/agents/${agent.name}`)).body.tools, [{ name: 'give_item', ...GIVE }])
  const sends = calls.filter((made) => made.path.endsWith('/messages'))
  assert.deepEqual(
    sends.map((made) => made.status),
    [202],
  )
  assert.deepEqual(
    answersOf(calls).map((made) => [made.method, made.status]),
    [['POST', 200]],
  )
})

test('a streamed send runs its calls too, and streams the reply that follows', async () => {
  const inventory = []
  const { agent } = innkeeper({ give_item: { ...GIVE, run: ({ item }) => inventory.push(item) && `Given: ${item}.` } })
  const pieces = []

  const turn = await agent.send(script(call('give_item', { item: 'lamp' }), { say: 'Mind the oil.', sleep: 0.1 }), {
    onText: (text) => pieces.push(text),
  })

  assert.equal(turn.status, 'completed')
  assert.equal(pieces.join(''), 'Mind the oil.')
  assert.deepEqual(shown(turn), [['give_item', 'Given: lamp.', false]])
  assert.deepEqual(inventory, ['lamp'])
})

test('long arguments, cut in the tool.requested event, reach the handler whole', async () => {
  const item = 'a scroll that reads ' + 'on and on '.repeat(600) // past the 4,000 characters an event shows
  const given = []
  const { agent, calls } = innkeeper({ give_item: { ...GIVE, run: (args) => given.push(args.item) && 'Given.' } })

  const turn = await agent.send(script(call('give_item', { item }), { say: 'A long read.' }), { onText: () => {} })

  assert.equal(turn.status, 'completed')
  assert.deepEqual(given, [item])
  // Read whole from the turn, as the event said they were cut.
  assert.ok(calls.some((made) => made.method === 'GET' && made.path.endsWith(`/turns/${turn.id}`)))
})

test('a handler that throws answers an error the model reads, in its message', async () => {
  const { agent } = innkeeper({
    give_item: {
      ...GIVE,
      run: async () => {
        throw new Error('The key is not in stock.')
      },
    },
  })

  const turn = await agent.send(HANDING)

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Here.')
  assert.deepEqual(shown(turn), [['give_item', 'The key is not in stock.', true]])
})

test('a call with no handler here is left alone: its deadline answers it', async () => {
  let purses = 0
  const { agent, calls } = innkeeper({
    give_item: { ...GIVE, timeoutSeconds: 1 }, // declared, run by other game code (here: none)
    look_up_purse: { ...PURSE, run: () => (purses += 1) },
  })

  const turn = await agent.send(HANDING)

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Here.')
  const [[name, result, isError]] = shown(turn)
  assert.equal(name, 'give_item')
  assert.equal(isError, true)
  assert.match(result, /did not answer within 1 s/)
  assert.deepEqual(answersOf(calls), [])
  assert.equal(purses, 0)
})

test('a handler still running at the deadline is told, and sends nothing', async () => {
  const reasons = []
  const { agent, calls } = innkeeper({
    give_item: {
      ...GIVE,
      timeoutSeconds: 1,
      run: (args, { signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            reasons.push(signal.reason)
            resolve('Too late.')
          })
        }),
    },
  })

  const turn = await agent.send(HANDING)

  assert.equal(turn.status, 'completed')
  assert.match(turn.toolCalls[0].result, /did not answer within 1 s/)
  await eventually(() => reasons.length === 1, 'the handler told')
  assert.equal(reasons[0].name, 'AbortError')
  assert.match(reasons[0].message, /deadline/)
  assert.deepEqual(answersOf(calls), [])
})

test('two calls of one step are run side by side and answered in any order', {
  skip: !severalCallsModel && 'STUDIO_SEVERAL_CALLS_MODEL is not set (tests/clients/test_js_client.py sets it)',
}, async () => {
  const order = []
  let purseAnswered
  const purseHeard = new Promise((resolve) => (purseAnswered = resolve))
  const { agent } = innkeeper(
    {
      give_item: {
        ...GIVE,
        run: async ({ item }) => {
          await purseHeard // answered second, though called first
          order.push('give_item')
          return `One ${item}.`
        },
      },
      look_up_purse: {
        ...PURSE,
        run: () => {
          order.push('look_up_purse')
          return { gold: 12 }
        },
      },
    },
    { model: severalCallsModel },
  )
  const answered = []
  const off = agent.on('tool.answered', (event) => {
    answered.push(event.name)
    if (event.name === 'look_up_purse') purseAnswered()
  })
  const both = [
    { call: 'give_item', args: { item: 'ale' } },
    { call: 'look_up_purse', args: {} },
  ]

  const turn = await agent.send(JSON.stringify({ script: [{ calls: both }, { say: 'Enjoy.' }] }))
  await eventually(() => answered.length === 2, 'both answers heard')
  off()

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Enjoy.')
  assert.deepEqual(shown(turn), [
    ['give_item', 'One ale.', false],
    ['look_up_purse', '{"gold": 12}', false],
  ])
  assert.deepEqual(order, ['look_up_purse', 'give_item'])
  assert.deepEqual(answered, ['look_up_purse', 'give_item'])
})

test('an aborted send aborts its running handler and cancels the waiting turn', async () => {
  const controller = new AbortController()
  let started
  const running = new Promise((resolve) => (started = resolve))
  const seen = []
  const { agent, calls } = innkeeper({
    give_item: {
      ...GIVE,
      run: (args, { signal }) => {
        started()
        return new Promise((resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason)))
      },
    },
  })

  const sending = agent.send(HANDING, { signal: controller.signal })
  const seeing = sending.catch((error) => seen.push(error))
  await running
  controller.abort()
  await seeing

  assert.equal(seen[0].name, 'AbortError')
  let turn
  await eventually(async () => {
    ;[turn] = (await raw('GET', `/api/v1/agents/${agent.name}/turns`)).body.turns
    return turn.endedAt
  }, 'the turn ended')
  assert.equal(turn.status, 'cancelled')
  assert.match(turn.toolCalls[0].result, /turn ended/)
  assert.deepEqual(answersOf(calls), [])
})

test('a waiting turn cancelled elsewhere ends the send, cancelled, and its handler is told', async () => {
  let started
  const running = new Promise((resolve) => (started = resolve))
  const reasons = []
  const { agent, calls } = innkeeper({
    give_item: {
      ...GIVE,
      run: (args, { signal, turnId }) => {
        started(turnId)
        return new Promise((resolve) =>
          signal.addEventListener('abort', () => {
            reasons.push(signal.reason)
            resolve('Too late.')
          }),
        )
      },
    },
  })

  const sending = agent.send(HANDING)
  const turnId = await running
  const cancelled = await raw('POST', `/api/v1/agents/${agent.name}/turns/${turnId}/cancel`)
  const turn = await sending

  assert.equal(cancelled.status, 202)
  assert.equal(turn.status, 'cancelled')
  assert.match(turn.toolCalls[0].result, /turn ended/)
  await eventually(() => reasons.length === 1, 'the handler told')
  assert.match(reasons[0].message, /turn ended/)
  assert.deepEqual(answersOf(calls), [])
})

test('a result the studio will not keep is answered as an error saying why', async () => {
  const { agent } = innkeeper({ give_item: { ...GIVE, run: () => 'x'.repeat(70_000) } })

  const turn = await agent.send(HANDING)

  assert.equal(turn.status, 'completed')
  const [[, result, isError]] = shown(turn)
  assert.equal(isError, true)
  assert.match(result, /could not be kept/)
  assert.match(result, /65,536/)
})

test('constructing again with the same tools sends nothing, and the newest handlers run', async () => {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  const name = uniqueName('inn')
  await new io.Agent(name, { tools: { give_item: { ...GIVE, run: () => 'the first' } } }).ready
  const again = new io.Agent(name, { tools: { give_item: { ...GIVE, run: () => 'the second' } } })

  const turn = await again.send(HANDING)

  assert.deepEqual(shown(turn), [['give_item', 'the second', false]])
  assert.deepEqual(
    recording.calls.filter((made) => made.method === 'PUT').map((made) => made.status),
    [201],
  )
  assert.throws(() => new io.Agent(name, { tools: [{ name: 'give_item', ...GIVE }] }), TypeError)
  assert.throws(() => new io.Agent(name, { tools: { give_item: { ...GIVE, run: 'give it' } } }), TypeError)
})
