// Sending: a reply, a memory written, a transient send, a streamed reply,
// retries that never run a turn twice, an abort that cancels; and the reads.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { call, eventually, raw, recordingFetch, script, studio, uniqueName } from './support.js'

const QUEST = call('close_memory', {
  name: 'quest',
  description: 'What the player is trying to do right now, and why',
  content: 'Find the silver key in the drowned chapel.',
})

function dungeonMaster(options = { systemPrompt: 'You are the dungeon master.', memory: {} }) {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  return { agent: new io.Agent(uniqueName('dm'), options), calls: recording.calls, io }
}

async function blocksOf(agent) {
  const blocks = []
  for await (const page of agent.history()) blocks.push(...page.blocks)
  return blocks
}

test('a send answers with the ended turn', async () => {
  const { agent } = dungeonMaster()

  const turn = await agent.send('I open the chapel door.')

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'You said: "I open the chapel door."')
  assert.equal(turn.block, 1)
  assert.equal(turn.transient, false)
  assert.deepEqual(turn.toolCalls, [])
  assert.equal(turn.cost.lines[0].kind, 'model')
})

test('a send that writes a memory: the tool call, its fee, the store and the history', async () => {
  const { agent } = dungeonMaster()

  const turn = await agent.send(script(QUEST, { say: 'The tide is out.' }))

  assert.equal(turn.reply, 'The tide is out.')
  assert.deepEqual(
    turn.toolCalls.map((made) => [made.name, made.isError]),
    [['close_memory', false]],
  )
  assert.deepEqual(
    turn.cost.lines.map((line) => [line.kind, line.quantity]).filter(([kind]) => kind === 'memory_access'),
    [['memory_access', 1]],
  )
  const store = await agent.memories()
  assert.deepEqual(
    store.memories.map((memory) => [memory.name, memory.content, memory.open, memory.updatedBy]),
    [['quest', 'Find the silver key in the drowned chapel.', false, 'agent']],
  )
  assert.equal(store.maxOpenTokens, 4000)
  const [block] = await blocksOf(agent)
  assert.deepEqual(
    block.entries.map((entry) => entry.type),
    ['message', 'tool_call', 'message'],
  )
  assert.deepEqual(await agent.cost(turn), turn.cost)
})

test('a transient send leaves no trace and is offered no memory tools', async () => {
  const { agent } = dungeonMaster()
  await agent.send('I light the lamp.')

  const turn = await agent.send(script(QUEST, { say: 'Just between us.' }), { transient: true })

  assert.equal(turn.status, 'completed')
  assert.equal(turn.transient, true)
  assert.equal(turn.block, null)
  assert.equal(turn.reply, 'Just between us.')
  assert.deepEqual(turn.toolCalls, [])
  assert.deepEqual((await agent.memories()).memories, [])
  assert.deepEqual(
    (await blocksOf(agent)).map((block) => block.block),
    [1],
  )
})

test('a streamed reply comes in pieces to onText, and they make the reply', async () => {
  const { agent } = dungeonMaster()
  const pieces = []

  // The scripted model pauses before each word: they cannot arrive as one.
  const turn = await agent.send(script({ say: 'The bells ring twice.', sleep: 0.2 }), {
    onText: (text) => pieces.push(text),
  })

  assert.equal(turn.status, 'completed')
  assert.ok(pieces.length > 1, `one piece: ${JSON.stringify(pieces)}`)
  assert.equal(pieces.join(''), turn.reply)
  assert.equal(turn.reply, 'The bells ring twice.')
})

test('a streamed send that writes a memory answers the same turn as a plain one', async () => {
  const { agent } = dungeonMaster()
  let text = ''

  const turn = await agent.send(script(QUEST, { say: 'Noted.' }), { onText: (piece) => (text += piece) })

  assert.equal(text, 'Noted.')
  assert.deepEqual(
    turn.toolCalls.map((made) => made.name),
    ['close_memory'],
  )
  assert.deepEqual(turn, (await raw('GET', `/api/v1/agents/${agent.name}/turns/${turn.id}`)).body.turn)
})

/** A fetch that takes every `reply.delta` event out of the studio's event streams. */
function deltaDroppingFetch(inner = fetch) {
  return async (url, init = {}) => {
    const response = await inner(url, init)
    if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) return response
    const text = await response.text()
    const kept = text
      .split('\n\n')
      .filter((event) => !/^event: reply\.delta$/m.test(event))
      .join('\n\n')
    return new Response(kept, { status: response.status, headers: response.headers })
  }
}

test('onText hears the whole reply once even when no word of it came as it was written', async () => {
  const io = connect({ ...studio, fetch: deltaDroppingFetch() })
  const agent = new io.Agent(uniqueName('dm'), { systemPrompt: 'You are the dungeon master.' })
  const pieces = []

  const turn = await agent.send(script({ say: 'The bells ring at dusk.' }), { onText: (piece) => pieces.push(piece) })

  assert.equal(turn.reply, 'The bells ring at dusk.')
  assert.deepEqual(pieces, ['The bells ring at dusk.'])
})

test('every send carries an Idempotency-Key; the same key twice is one turn', async () => {
  const { agent, calls } = dungeonMaster()

  const first = await agent.send('Once.', { idempotencyKey: 'once-only' })
  const again = await agent.send('Once.', { idempotencyKey: 'once-only' })
  await agent.send('Twice.')

  assert.equal(again.id, first.id)
  const sends = calls.filter((made) => made.path.endsWith('/messages'))
  assert.deepEqual(
    sends.map((made) => made.idempotencyKey === 'once-only'),
    [true, true, false],
  )
  assert.match(sends[2].idempotencyKey, /^[0-9a-f-]{36}$/)
  assert.equal((await blocksOf(agent)).length, 2)
})

test('a send whose answer is lost on the way is sent again and never runs twice', async () => {
  let lost = 0
  // The studio gets the send and answers, but the answer never arrives.
  const losing = async (url, init) => {
    const response = await fetch(url, init)
    if (init?.method === 'POST' && url.endsWith('/messages') && lost < 1) {
      lost += 1
      await response.text()
      throw new TypeError('fetch failed')
    }
    return response
  }
  const recording = recordingFetch(losing)
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), { memory: {} })

  const turn = await agent.send(script(QUEST, { say: 'Once.' }))

  assert.equal(turn.reply, 'Once.')
  const sends = recording.calls.filter((made) => made.path.endsWith('/messages'))
  assert.equal(sends.length, 2)
  assert.equal(sends[0].idempotencyKey, sends[1].idempotencyKey)
  const blocks = await blocksOf(agent)
  assert.deepEqual(
    blocks.map((block) => block.turnId),
    [turn.id],
  )
  assert.equal((await agent.memories()).memories.length, 1)
})

test('a send whose answer breaks off halfway is asked again and never runs twice', async () => {
  let cuts = 1
  const cutting = async (url, init) => {
    const response = await fetch(url, init)
    if (!(init?.method === 'POST' && url.endsWith('/messages') && cuts-- > 0)) return response
    const text = await response.text()
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(text.slice(0, 20)))
        controller.error(new TypeError('terminated'))
      },
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }
  const recording = recordingFetch(cutting)
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})

  const turn = await agent.send('Only once.')

  assert.equal(turn.reply, 'You said: "Only once."')
  const sends = recording.calls.filter((made) => made.path.endsWith('/messages'))
  assert.equal(sends.length, 2)
  assert.equal(sends[0].idempotencyKey, sends[1].idempotencyKey)
  assert.deepEqual(
    (await blocksOf(agent)).map((block) => block.turnId),
    [turn.id],
  )
})

test('a streamed reply that breaks off is followed again: no piece lost or heard twice, one turn', async () => {
  let cuts = 1
  // The first streamed answer breaks off once the reply has begun.
  const cutting = async (url, init) => {
    const response = await fetch(url, init)
    if (!(init?.method === 'POST' && url.endsWith('/messages') && cuts-- > 0)) return response
    const reader = response.body.getReader()
    const decoder = new TextDecoder()
    let passed = ''
    const body = new ReadableStream({
      async pull(controller) {
        if (passed.includes('event: reply.delta')) {
          await reader.cancel()
          controller.error(new TypeError('terminated'))
          return
        }
        const { done, value } = await reader.read()
        if (done) return controller.close()
        passed += decoder.decode(value, { stream: true })
        controller.enqueue(value)
      },
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }
  const recording = recordingFetch(cutting)
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})
  const pieces = []

  const turn = await agent.send(script({ say: 'The bells ring twice.', sleep: 0.2 }), {
    onText: (text) => pieces.push(text),
  })

  assert.equal(turn.reply, 'The bells ring twice.')
  assert.equal(pieces.join(''), turn.reply)
  const sends = recording.calls.filter((made) => made.path.endsWith('/messages'))
  assert.equal(sends.length, 2)
  assert.equal(sends[0].idempotencyKey, sends[1].idempotencyKey)
  assert.deepEqual(
    (await blocksOf(agent)).map((block) => block.turnId),
    [turn.id],
  )
})

test('a send answered at once (202, as a fifth repeat is) is followed to its end', async () => {
  let once = 1
  // The studio is asked not to wait, as it answers a repeat when enough wait on the turn.
  const answeringAtOnce = (url, init) => {
    if (init?.method === 'POST' && url.endsWith('/messages') && once-- > 0) {
      init = { ...init, body: JSON.stringify({ ...JSON.parse(init.body), wait: false }) }
    }
    return fetch(url, init)
  }
  const recording = recordingFetch(answeringAtOnce)
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})

  const turn = await agent.send(script({ sleep: 0.3 }, { say: 'Later.' }))

  assert.equal(turn.status, 'completed')
  assert.equal(turn.reply, 'Later.')
  assert.deepEqual(
    recording.calls.slice(1).map((made) => [made.method, made.path.split('/').at(-1), made.status]),
    [
      ['POST', 'messages', 202],
      ['GET', 'events', 200],
    ],
  )
})

test('429 and 503 are tried again after their Retry-After, with the same key', async () => {
  const busy = [429, 503]
  const refusing = async (url, init) => {
    if (init?.method === 'POST' && url.endsWith('/messages') && busy.length) {
      const status = busy.shift()
      const body = { error: { code: status === 429 ? 'agent_busy' : 'unavailable', message: 'Busy: try again.' } }
      return new Response(JSON.stringify(body), { status, headers: { 'Retry-After': '0', 'Content-Type': 'application/json' } })
    }
    return fetch(url, init)
  }
  const recording = recordingFetch(refusing)
  const io = connect({ ...studio, fetch: recording.fetch })
  const agent = new io.Agent(uniqueName('dm'), {})

  const turn = await agent.send('Patience.')

  assert.equal(turn.status, 'completed')
  const sends = recording.calls.filter((made) => made.path.endsWith('/messages'))
  assert.deepEqual(
    sends.map((made) => made.status),
    [429, 503, 200],
  )
  assert.equal(new Set(sends.map((made) => made.idempotencyKey)).size, 1)
})

test('an error the studio keeps answering is a StudioError with its code, message and Retry-After', async () => {
  const refusing = async (url, init) =>
    url.endsWith('/messages')
      ? new Response(JSON.stringify({ error: { code: 'game_busy', message: 'The game has 64 live turns.' } }), {
          status: 429,
          headers: { 'Retry-After': '0' },
        })
      : fetch(url, init)
  const io = connect({ ...studio, fetch: refusing, retries: 1 })
  const agent = new io.Agent(uniqueName('dm'), {})

  await assert.rejects(agent.send('Anyone?'), (error) => {
    assert.ok(error instanceof StudioError)
    assert.equal(error.status, 429)
    assert.equal(error.code, 'game_busy')
    assert.equal(error.message, 'The game has 64 live turns.')
    assert.equal(error.retryAfter, 0)
    return true
  })
})

test('a definition only the studio can refuse rejects ready, and sends, with its error', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('dm'), { model: 'nobody:no-model' })

  await assert.rejects(agent.ready, (error) => {
    assert.ok(error instanceof StudioError)
    assert.equal(error.status, 400)
    assert.equal(error.code, 'invalid_definition')
    assert.ok(error.message.includes('nobody:no-model'), error.message)
    return true
  })
  await assert.rejects(agent.send('Hello?'), { code: 'invalid_definition' })
  const small = new io.Agent(uniqueName('dm'), { compaction: { maxTokens: 100 } })
  await assert.rejects(small.ready, (error) => {
    assert.equal(error.code, 'invalid_definition')
    assert.deepEqual(
      error.details.map((problem) => problem.field),
      ['compaction.maxTokens'],
    )
    return true
  })
})

test('a bad name throws at once, in the studio\'s words', () => {
  const io = connect(studio)

  assert.throws(() => new io.Agent('the dm', {}), (error) => {
    assert.ok(error instanceof StudioError)
    assert.equal(error.code, 'invalid_name')
    assert.match(error.message, /'the dm' is not a valid agent name/)
    return true
  })
})

test('constructing again: the same options send nothing, other options one PUT', async () => {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  const name = uniqueName('dm')
  await new io.Agent(name, { systemPrompt: 'Be brief.', memory: {} }).ready

  for (let i = 0; i < 3; i += 1) await new io.Agent(name, { memory: {}, systemPrompt: 'Be brief.' }).ready
  const changed = await new io.Agent(name, { systemPrompt: 'Be briefer.', memory: {} }).ready

  assert.deepEqual(
    recording.calls.map((made) => [made.method, made.status]),
    [
      ['PUT', 201],
      ['PUT', 200],
    ],
  )
  assert.equal(changed.systemPrompt, 'Be briefer.')
})

test('an aborted send cancels its turn', async () => {
  const { agent } = dungeonMaster()
  const controller = new AbortController()
  const started = new Promise((resolve) => {
    const off = agent.on('turn.started', () => {
      off()
      resolve()
    })
  })

  const sending = agent.send(script({ sleep: 10 }, { say: 'Too late.' }), { signal: controller.signal })
  await started
  controller.abort()

  await assert.rejects(sending, { name: 'AbortError' })
  // Cancelled (202): the turn ends as soon as its model call stops.
  let turns
  await eventually(async () => {
    turns = (await raw('GET', `/api/v1/agents/${agent.name}/turns`)).body.turns
    return turns[0].status !== 'running'
  }, 'the turn ended')
  assert.deepEqual(
    turns.map((turn) => [turn.status, turn.reply]),
    [['cancelled', '']],
  )
})

test('an aborted send still queued behind another turn is cancelled before it plays', async () => {
  const { agent, calls } = dungeonMaster()
  const first = new AbortController()
  const second = new AbortController()
  const started = new Promise((resolve) => {
    const off = agent.on('turn.started', () => {
      off()
      resolve()
    })
  })
  const playing = agent.send(script({ sleep: 10 }, { say: 'First.' }), { signal: first.signal })
  await started

  const queued = agent.send('Second.', { signal: second.signal })
  const sends = () => calls.filter((made) => made.path.endsWith('/messages'))
  await eventually(() => sends().length === 2 && sends()[1].status === 200, 'the studio has the second send')
  second.abort()
  await assert.rejects(queued, { name: 'AbortError' })
  first.abort()
  await assert.rejects(playing, { name: 'AbortError' })

  let turns
  await eventually(async () => {
    turns = (await raw('GET', `/api/v1/agents/${agent.name}/turns`)).body.turns
    return turns.every((turn) => turn.endedAt)
  }, 'both turns ended')
  assert.deepEqual(
    turns.map((turn) => [turn.status, turn.block]), // newest first
    [
      ['cancelled', null],
      ['cancelled', 1],
    ],
  )
})

test('the reads: history a page at a time, the context, the billing', async () => {
  const { agent, io } = dungeonMaster()
  for (const line of ['One.', 'Two.', 'Three.']) await agent.send(line)

  const pages = []
  for await (const page of agent.history({ limit: 2 })) pages.push(page.blocks.map((block) => block.block))
  const context = await agent.context()
  const billing = await io.billing()

  assert.deepEqual(pages, [[1, 2], [3]])
  assert.deepEqual(context.tools, ['open_memory', 'close_memory', 'delete_memory'])
  assert.equal(context.system, 'You are the dungeon master.')
  assert.match(billing.balance, /^\d+\.\d{6}$/)
  assert.ok(billing.prices.memoryAccess)
})
