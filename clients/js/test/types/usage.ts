// The client as game code writes it in TypeScript: the README's calls, each
// typed, and wrong uses the declarations must refuse (`@ts-expect-error`: the
// check fails if the line below it is accepted). Only type-checked
// (`npm run typecheck`, which `make test` runs); never executed.

import {
  connect,
  OUT_OF_CREDITS,
  StudioError,
  type Agent,
  type Io,
  type MemoryStore,
  type StudioEvent,
  type Turn,
} from 'studio-client'

declare function showReply(reply: string, block: number | null): void
declare function tellThePlayerTheDmIsResting(): void
declare function write(text: string): void

// --- connect -------------------------------------------------------------------------

const io: Io = connect({ url: 'http://127.0.0.1:8000', key: 'sk_…', retries: 3 })
connect({ url: 'https://studio.example.com', key: 'sk_…', WebSocket: globalThis.WebSocket, fetch: globalThis.fetch })
// @ts-expect-error the key is required
connect({ url: 'http://127.0.0.1:8000' })
// @ts-expect-error retries is a number
connect({ url: 'http://127.0.0.1:8000', key: 'sk_…', retries: 'five' })

// --- new io.Agent --------------------------------------------------------------------

io.agents.dm = new io.Agent('dm', {
  systemPrompt: 'You are the dungeon master. Keep the story straight.',
  model: 'scripted',
  memory: { maxOpenTokens: 2000 },
  compaction: { type: 'sliding-window', maxTokens: 16000 },
})
const stock = new Set(['key', 'ale'])
const inventory: string[] = []
io.agents.innkeeper = new io.Agent('innkeeper', {
  systemPrompt: 'You keep the inn. Hand over what the player pays for.',
  memory: {},
  tools: {
    give_item: {
      description: "Hand the player an item from the inn's stock.",
      parameters: { type: 'object', properties: { item: { type: 'string' } }, required: ['item'] },
      timeoutSeconds: 30,
      run: async ({ item }, { signal, turnId, callId, name, deadline }) => {
        signal.throwIfAborted()
        const said: string = `${name} ${turnId} ${callId} ${deadline}`
        if (!stock.has(item)) throw new Error(`There is no ${item} in stock (${said}).`)
        inventory.push(item)
        return { given: item, inventory }
      },
    },
    // Declared only: its calls are someone else's to answer.
    open_gate: { description: 'Open the town gate.' },
  },
})
const dm: Agent = io.agents.dm
const ready = await dm.ready
const revision: number = ready.revision.number
const via: string = ready.revision.via
const etag: string | null = dm.etag
const next = new io.Agent('dm', { systemPrompt: 'You are the ferryman.' }, { ifMatch: dm.revision ?? '*' })
new io.Agent('dm', {}, { ifMatch: etag ?? '*' })
try {
  await next.ready
} catch (error) {
  if (!(error instanceof StudioError) || error.code !== 'definition_changed') throw error
}
new io.Agent('dm')

// @ts-expect-error a misspelt option
new io.Agent('inn3', { systemPromt: 'You keep the inn.' })
// @ts-expect-error maxTokens is a number
new io.Agent('inn3', { compaction: { maxTokens: '8000' } })
// @ts-expect-error no such compaction type
new io.Agent('inn3', { compaction: { type: 'truncate' } })
// @ts-expect-error a tool needs its description
new io.Agent('inn3', { tools: { give_item: { run: () => 'ok' } } })
// @ts-expect-error ifMatch is a revision or an ETag
new io.Agent('inn3', {}, { ifMatch: true })
// @ts-expect-error the agent's name is read-only
dm.name = 'other'

// --- send ----------------------------------------------------------------------------

const turn: Turn = await dm.send('I open the chapel door.')
showReply(turn.reply, turn.block)
const status: 'completed' | 'cancelled' | 'failed' | 'queued' | 'running' | 'waiting' = turn.status
if (turn.status === 'failed') console.log(turn.error, turn.errorCode)
if (turn.cutShort) console.log(turn.cutShort.code, turn.cutShort.message)
for (const call of turn.toolCalls) console.log(call.name, call.arguments, call.result, call.isError, call.cut?.result)
console.log(turn.cost.total, turn.cost.lines.map((line) => `${line.kind} ${line.label} ${line.quantity} ${line.amount}`))
console.log(turn.id, turn.transient, turn.createdAt, turn.endedAt, turn.compactionWaitMs, status, revision, via)

const controller = new AbortController()
await dm.send('Tell me the whole legend.', {
  onText: (text, event) => write(text + event.turnId),
  signal: controller.signal,
  idempotencyKey: 'move-42',
  transient: true,
})
await dm.send('Hurry.', { signal: AbortSignal.timeout(30_000) })
// @ts-expect-error content is a string
await dm.send({ content: 'hi' })
// @ts-expect-error onText gets text, not a number
await dm.send('hi', { onText: (text: number) => text })
// @ts-expect-error no such option
await dm.send('hi', { stream: true })

// --- errors, and reconciling a lost answer -------------------------------------------

try {
  await dm.send('I open the chapel door.')
} catch (error) {
  if (!(error instanceof StudioError)) throw error
  if (error.outOfCredits) tellThePlayerTheDmIsResting()
  const code: string = error.code
  const httpStatus: number | null = error.status
  const wait: number | null = error.retryAfter
  const fields = error.details?.map((detail) => `${detail.field ?? '-'}: ${detail.message}`)
  console.log(code, httpStatus, wait, fields, OUT_OF_CREDITS.includes(code), error.message)
  if (error.code === 'network_error' && error.idempotencyKey) {
    const ran: Turn | null = await dm.turnByIdempotencyKey(error.idempotencyKey)
    if (ran) showReply(ran.reply, ran.block)
    else await dm.send('I open the chapel door.', { idempotencyKey: error.idempotencyKey })
  }
  // @ts-expect-error the error's fields are read-only
  error.code = 'other'
}
const made = new StudioError({ status: 400, code: 'invalid_definition', message: 'No.' })
console.log(made.name === 'StudioError', made.idempotencyKey)
// @ts-expect-error a StudioError is made of its fields
new StudioError('No.')
// @ts-expect-error the key is a string
await dm.turnByIdempotencyKey(42)

// --- events --------------------------------------------------------------------------

const off: () => void = dm.on('memory.changed', (event) => {
  console.log(`${event.by} ${event.change} memory ${event.name}`)
})
off()
dm.on('reply.delta', (event) => write(event.text))
dm.on('turn.finished', (event) => showReply(event.turn.reply, event.block))
dm.on('tool.requested', (event) => console.log(event.callId, event.deadline, event.arguments))
dm.on('tool.answered', (event) => console.log(event.by === 'deadline', event.result))
dm.on('resync', (event) => console.log(event.seq))
dm.on('error', (event) => console.log(event.code, event.message))
dm.on('replay.progress', (event) => console.log(event.played, event.total))
dm.on('budget.low', (event) => console.log(event.trigger, event.balance))
dm.on('*', (event: StudioEvent) => console.log(event.type, event.seq, event.at))
dm.on('something.new', (event) => console.log(event.type))
// @ts-expect-error a memory.changed event has no text
dm.on('memory.changed', (event) => event.text.length)
// @ts-expect-error the handler is a function
dm.on('turn.started', 'not a function')
// @ts-expect-error the type is a string
dm.on(42, () => {})

// --- reads ---------------------------------------------------------------------------

const store: MemoryStore = await dm.memories({ atBlock: 3 })
for (const memory of store.memories) console.log(memory.name, memory.content, memory.open, memory.updatedBy)
console.log(store.openTokens, store.maxOpenTokens, store.storeBytes, store.storeCapBytes, store.memoryEnabled)
for await (const page of dm.history({ after: 10, limit: 100 })) {
  for (const block of page.blocks) {
    for (const entry of block.entries) {
      if (entry.type === 'message') console.log(entry.role, entry.content)
      else console.log(entry.name, entry.result ?? entry.waitingForGame?.deadline, entry.isError)
    }
  }
  console.log(page.nextCursor, page.nextAfter)
}
const context = await dm.context({ atBlock: 2 })
console.log(context.system, context.contextBlock, context.messages.length, context.tokens.total, context.tools)
const cost = await dm.cost(turn)
await dm.cost(turn.id)
console.log(cost.total)
const billing = await io.billing()
console.log(billing.balance, billing.available, billing.monthlyCap, billing.prices.memoryAccess)
// @ts-expect-error atBlock is a number
await dm.memories({ atBlock: 'three' })
// @ts-expect-error a turn, or its id
await dm.cost(3)

// --- replays -------------------------------------------------------------------------

const replay = await dm.replay(
  { fromBlock: 12, definition: { systemPrompt: 'You are the dungeon master. Remember every name.' } },
  { onProgress: (event) => console.log(`block ${event.block}: ${event.played} of ${event.total}`), signal: controller.signal },
)
for (const row of replay.rows) {
  if (!row.sameReply) console.log(row.block, row.original?.reply, '→', row.replay?.reply)
}
for (const memory of replay.memories?.memories ?? []) {
  if (memory.change !== 'same') console.log(memory.name, memory.change, memory.lines)
}
console.log('it cost', replay.cost.total, 'credits', replay.status, replay.errorCode)
const { replays, nextCursor } = await dm.replays({ limit: 10 })
console.log(replays.map((summary) => summary.replayAgent), nextCursor)
// @ts-expect-error fromBlock is required
await dm.replay({ through: 3 })
// @ts-expect-error a replay changes the definition, not the agent's tools' handlers
await dm.replay({ fromBlock: 1, definition: { systemPromt: 'x' } })
