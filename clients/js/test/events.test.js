// Listening: agent.on(type, handler) over the WebSocket, and a socket that
// drops mid-game coming back with `since`, nothing lost or heard twice.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { connect } from '../index.js'
import { call, controlledWebSockets, eventually, referenceListener, script, studio, uniqueName } from './support.js'

const QUEST = call('close_memory', { name: 'quest', description: 'Now', content: 'Find the key.' })

const ofTurn = (events, turn) => events.filter((event) => event.turnId === turn.id).map((event) => event.type)

test('on(type) hears the events of a send, and off() stops them', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('dm'), { memory: {} })
  const finished = []
  const changed = []
  const offFinished = agent.on('turn.finished', (event) => finished.push(event))
  const offChanged = agent.on('memory.changed', (event) => changed.push(event))

  // A send waits until the listener is connected, so it hears the whole turn.
  const turn = await agent.send(script(QUEST, { say: 'Noted.' }))
  await eventually(() => finished.length === 1, 'turn.finished heard')
  offFinished()
  offChanged()

  assert.equal(finished[0].turnId, turn.id)
  assert.equal(finished[0].status, 'completed')
  assert.equal(finished[0].cost.total, turn.cost.total)
  assert.deepEqual(
    changed.map((event) => [event.name, event.change, event.by]),
    [['quest', 'created', 'agent']],
  )
})

test('events go on after the socket drops, from where they stopped: none lost, none twice', async () => {
  const sockets = controlledWebSockets()
  const io = connect({ ...studio, WebSocket: sockets.WebSocket })
  const agent = new io.Agent(uniqueName('dm'), { memory: {} })
  await agent.ready
  const reference = await referenceListener(agent.name) // beside the client, never dropped
  const heard = []
  const off = agent.on('*', (event) => heard.push(event))

  const one = await agent.send('One.')
  await eventually(() => ofTurn(heard, one).includes('turn.finished'), 'the first turn heard')
  const lastBeforeTheDrop = heard.at(-1).seq
  sockets.hold() // the client's next socket waits …
  sockets.sockets[0].cut() // … while this one drops, as a network would drop it
  const two = await agent.send(script(QUEST, { say: 'While you were away.' }))
  const three = await agent.send('Three.')
  sockets.release()
  await eventually(() => ofTurn(heard, three).includes('turn.finished'), 'the third turn heard')
  off()
  reference.close()

  assert.equal(sockets.urls.length, 2)
  assert.ok(sockets.urls[1].endsWith(`?since=${lastBeforeTheDrop}`), sockets.urls[1])
  assert.deepEqual(ofTurn(heard, two), ['turn.started', 'memory.changed', 'tool_call', 'reply.delta', 'turn.finished'])
  assert.deepEqual(
    heard.map((event) => event.seq),
    reference.events.map((event) => event.seq),
  )
  assert.deepEqual(heard, reference.events)
})

test('a socket that drops before it heard anything resumes from its hello', async () => {
  const sockets = controlledWebSockets()
  const io = connect({ ...studio, WebSocket: sockets.WebSocket })
  const agent = new io.Agent(uniqueName('dm'), {})
  await agent.send('Before anyone listens.') // the agent has events: hello names the newest
  const heard = []
  const off = agent.on('*', (event) => heard.push(event))
  await eventually(() => sockets.sockets[0]?.real?.readyState === 1, 'the socket open')

  sockets.hold()
  sockets.sockets[0].cut()
  const missed = await agent.send('While away.')
  sockets.release()
  await eventually(() => ofTurn(heard, missed).includes('turn.finished'), 'the missed turn heard')
  off()

  assert.match(sockets.urls[1], /\?since=\d+$/)
  assert.deepEqual(ofTurn(heard, missed), ['turn.started', 'reply.delta', 'turn.finished'])
  assert.deepEqual(
    heard.map((event) => event.turnId),
    [missed.id, missed.id, missed.id],
  )
})

test('a key the studio refuses ends the listener with an error event', async () => {
  const io = connect({ ...studio, key: 'sk_nobody_nothing' })
  const agent = new io.Agent(uniqueName('dm'), {})
  await assert.rejects(agent.ready, { status: 401 })

  const errors = []
  agent.on('error', (event) => errors.push(event))
  await eventually(() => errors.length === 1, 'the error heard')

  assert.equal(errors[0].code, 'unauthenticated')
  assert.equal(errors[0].closeCode, 4401)
})
