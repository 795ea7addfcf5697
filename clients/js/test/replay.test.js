// Replays: agent.replay(...) played to its end with each block heard, the
// studio's refusal of a second one at once, an abort that cancels, a
// replay followed without an event stream, and a start never sent twice.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { call, eventually, raw, recordingFetch, script, studio, uniqueName } from './support.js'

const QUEST = call('close_memory', { name: 'quest', description: 'Now', content: 'Find the silver key.' })
const MESSAGES = ['I open the chapel door.', script(QUEST, { say: 'Noted.' }), 'I ring the bell.']

async function played(agent, messages = MESSAGES) {
  const turns = []
  for (const message of messages) turns.push(await agent.send(message))
  return turns
}

test('a replay with a changed prompt ends with a row per block, each block heard on the way', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('dm'), { systemPrompt: 'You are the dungeon master.', memory: {} })
  const turns = await played(agent)
  const heard = []

  const replay = await agent.replay(
    { fromBlock: 1, definition: { systemPrompt: 'You are a forgetful dungeon master.' } },
    { onProgress: (event) => heard.push(event) },
  )

  assert.equal(replay.status, 'completed')
  assert.deepEqual([replay.fromBlock, replay.through], [1, 3])
  assert.deepEqual(replay.definition, { systemPrompt: 'You are a forgetful dungeon master.' })
  assert.deepEqual(replay.progress, { played: 3, total: 3 })
  assert.deepEqual(
    replay.rows.map((row) => [row.block, row.message, row.original.reply, row.replay.reply]),
    turns.map((turn, at) => [at + 1, MESSAGES[at], turn.reply, turn.reply]), // the scripted model reads no prompt
  )
  assert.deepEqual(
    heard.map((event) => [event.type, event.replayId, event.block, event.played, event.total]),
    [1, 2, 3].map((block) => ['replay.progress', replay.id, block, block, 3]),
  )
  // As the studio answers it, and listed first.
  const shown = await raw('GET', `/api/v1/agents/${agent.name}/replays/${replay.id}`)
  assert.deepEqual(replay, shown.body.replay)
  const listed = await agent.replays()
  assert.deepEqual(
    listed.replays.map((item) => [item.id, item.status]),
    [[replay.id, 'completed']],
  )
  assert.equal(listed.nextCursor, null)
  assert.equal(listed.replays[0].rows, undefined)
})

test('a second replay while one runs is the studio’s 409; aborting the first cancels it', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('dm'), { memory: {} })
  await agent.send('Hello.')
  // Block 2 sleeps, and so does its replay, until it is cancelled.
  const sleeping = new AbortController()
  let off
  const started = new Promise((resolve) => {
    off = agent.on('turn.started', resolve)
  })
  const slow = agent.send(script({ sleep: 30 }, { say: 'Late.' }), { signal: sleeping.signal })
  await started
  off()
  sleeping.abort()
  await assert.rejects(slow, { name: 'AbortError' })
  const history = async () => (await raw('GET', `/api/v1/agents/${agent.name}/history`)).body.blocks
  await eventually(async () => (await history())[1]?.status === 'cancelled', 'block 2 cancelled')

  const controller = new AbortController()
  const heard = []
  const first = agent.replay({ fromBlock: 1 }, { onProgress: (event) => heard.push(event), signal: controller.signal })
  await eventually(() => heard.length === 1, 'block 1 replayed') // the replay is on block 2 now

  const refused = await agent.replay({ fromBlock: 2 }).catch((error) => error)
  assert.ok(refused instanceof StudioError, String(refused))
  assert.deepEqual([refused.status, refused.code], [409, 'replay_running'])

  controller.abort()
  await assert.rejects(first, { name: 'AbortError' })
  await eventually(async () => (await agent.replays()).replays[0].status === 'cancelled', 'the replay cancelled')
  const [cancelled] = (await agent.replays()).replays
  assert.equal(cancelled.id, heard[0].replayId)
  assert.deepEqual(cancelled.progress, { played: 2, total: 2 })
})

test('without an event stream the replay is still followed to its end', async () => {
  // Sockets that never open: the studio is asked instead, now and then.
  class Unreachable extends EventTarget {
    constructor() {
      super()
      setTimeout(() => this.dispatchEvent(Object.assign(new Event('close'), { code: 1006 })), 10)
    }

    close() {}
  }
  const io = connect({ ...studio, WebSocket: Unreachable })
  const agent = new io.Agent(uniqueName('dm'), { memory: {} })
  await played(agent)
  const heard = []

  const replay = await agent.replay({ fromBlock: 2, through: 3 }, { onProgress: (event) => heard.push(event) })

  assert.equal(replay.status, 'completed')
  assert.deepEqual(
    replay.rows.map((row) => [row.block, row.sameReply, row.sameToolCalls]),
    [
      [2, true, true],
      [3, true, true],
    ],
  )
  assert.deepEqual(heard, [])
})

test('a start whose answer is lost is not sent again', async () => {
  const recording = recordingFetch()
  let lose = false
  const losing = async (url, init) => {
    const response = await recording.fetch(url, init)
    if (lose && init?.method === 'POST' && new URL(url).pathname.endsWith('/replays')) {
      lose = false
      throw new TypeError('fetch failed') // the answer never came back
    }
    return response
  }
  const io = connect({ ...studio, fetch: losing })
  const agent = new io.Agent(uniqueName('dm'), {})
  await played(agent, ['One.', 'Two.'])
  lose = true

  const lost = await agent.replay({ fromBlock: 1 }).catch((error) => error)

  assert.ok(lost instanceof StudioError, String(lost))
  assert.equal(lost.code, 'network_error')
  assert.match(lost.message, /may or may not have been carried out/)
  const starts = recording.calls.filter((made) => made.method === 'POST' && made.path.endsWith('/replays'))
  assert.equal(starts.length, 1)
  assert.equal((await agent.replays()).replays.length, 1) // it did start, once
  await eventually(async () => (await agent.replays()).replays[0].status === 'completed', 'the replay ended')
})

test('a replay the studio refuses rejects with its error', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('dm'), {})
  await played(agent, ['One.'])

  const refused = await agent.replay({ fromBlock: 1, through: 60 }).catch((error) => error)
  const missing = await agent.replay({}).catch((error) => error)

  assert.ok(refused instanceof StudioError)
  assert.deepEqual([refused.status, refused.code, refused.details[0].field], [400, 'invalid_request', 'through'])
  assert.deepEqual([missing.status, missing.code, missing.details[0].field], [400, 'invalid_request', 'fromBlock'])
})
