// Type declarations of studio-client (hand-written; the code is index.js).

/** Connects game code to one studio with one of its game's API keys. */
export function connect(options: ConnectOptions): Io

export interface ConnectOptions {
  /** The studio's address: `http://127.0.0.1:8000`, `https://studio.example.com`. */
  url: string
  /** An API key of the game (`sk_…`); designer keys can do everything here. */
  key: string
  /** The WebSocket class for `agent.on` (default: the runtime's, else the `ws` package). */
  WebSocket?: WebSocketClass
  /** The fetch to use (default: the runtime's). */
  fetch?: typeof globalThis.fetch
  /** Tries after the first on a network error, 429, 502, 503 or 504 (default 5). */
  retries?: number
}

export type WebSocketClass = new (url: string, protocols: string[]) => {
  addEventListener(type: string, listener: (event: any) => void): void
  close(code?: number): void
}

export interface Io {
  /** The spec's class: `new io.Agent(name, options)` defines (or redefines) an agent. */
  Agent: AgentConstructor
  /** A plain object for game code to keep its agents in: `io.agents.dm = new io.Agent('dm', …)`. */
  agents: Record<string, Agent>
  /** The game's balance, what is held, limits and the price list. */
  billing(): Promise<Billing>
}

export interface AgentConstructor {
  /**
   * Checks the options at once — their names and JSON types, against the studio's definition
   * schema (a misspelt option gets a did-you-mean), and the spec's definition-time rule — throwing
   * a StudioError, 400 `invalid_definition`, with a `{ field, message }` per problem in `details`;
   * then defines the agent on the studio in the background (`ready`). A failure of that nothing
   * awaits is written to stderr and is the next send's error. The same options as this io's last
   * definition of the name send nothing (unless `settings.ifMatch` is given).
   */
  new (name: string, options?: AgentOptions, settings?: AgentSettings): Agent
}

/** How a construction defines the agent. */
export interface AgentSettings {
  /**
   * Define the agent only if it is still at this revision of its config (`agent.revision`, or its
   * ETag `agent.etag`; `'*'`: any): if it has been defined since, by anyone — a designer in the
   * studio, other game code — `ready` rejects with a StudioError, code `definition_changed`
   * (status 412), and the agent keeps its config. Absent: the definition replaces whatever it is.
   * A construction with `ifMatch` always sends its definition.
   */
  ifMatch?: number | string
}

/** The spec's option names; absent ones take the studio's defaults. */
export interface AgentOptions {
  systemPrompt?: string
  /** `scripted`, `openai:<model>`, `anthropic:<model>`; absent: the game's default model. */
  model?: string
  /** Present (even `{}`): memory is on. Absent or null: no memory tools. */
  memory?: { maxOpenTokens?: number } | null
  /** Default `{ type: 'summarize', maxTokens: 32000 }`. */
  compaction?: { type?: 'summarize' | 'sliding-window'; maxTokens?: number }
  /**
   * The game's own tools the model may call, by name (1–64 of `A-Z a-z 0-9 _ -`, none a memory
   * tool's). Sent in the definition without `run`; a call of one with a `run` made by a turn this
   * client sent is run here and answered. Absent or null: none.
   */
  tools?: Record<string, Tool> | null
}

/** One of the game's tools: what the model is told of it, and what runs it here. */
export interface Tool {
  /** What it does and when to call it: the model reads it (1–1,024 characters). */
  description: string
  /** Its arguments, a JSON Schema of an object; absent: none. */
  parameters?: Record<string, unknown>
  /** How long the game has to answer a call (default the studio's, 60). Past it the model reads that the game did not answer. */
  timeoutSeconds?: number
  /**
   * Runs a call: what it resolves with is the result (a string as it is, anything else as JSON;
   * undefined or null as `null`); what it throws is an error the model reads (its message).
   * Absent: the tool is declared, and its calls are left to other game code or their deadline.
   */
  run?: (args: Record<string, any>, context: ToolContext) => unknown | Promise<unknown>
}

export interface ToolContext {
  /**
   * Aborts when the call is no longer waited for: its deadline passed, other game code answered
   * it, the turn ended, or the send was aborted (then with the send's reason).
   */
  signal: AbortSignal
  turnId: string
  callId: string
  /** The tool's name. */
  name: string
  /** When the studio stops waiting for the answer (ISO 8601). */
  deadline: string
}

/** A call a waiting turn waits on (`pendingToolCalls`, and the `tool.requested` event). */
export interface PendingToolCall {
  callId: string
  name: string
  arguments: Record<string, unknown>
  /** ISO 8601: past it, the model reads that the game did not answer. */
  deadline: string
}

/** A turn's model called one of the game's tools: the turn waits for the game's answer. */
export interface ToolRequestedEvent extends StudioEvent {
  type: 'tool.requested'
  turnId: string
  callId: string
  name: string
  /**
   * The call's arguments; their strings cut when long (then `cut` says so, and arguments made of many
   * small values come as their text, cut). The turn's `pendingToolCalls` carry them whole, and a
   * tool's `run` gets them so.
   */
  arguments: Record<string, unknown> | string
  /** ISO 8601: past it, the model reads that the game did not answer. */
  deadline: string
  /**
   * Set when the arguments' strings were cut (STUDIO_SHOWN_TEXT_MAX_CHARS): their whole length, and
   * the block that keeps them.
   */
  cut?: { block: number | null; arguments?: number }
}

/** A call of one of the game's tools has its answer. */
export interface ToolAnsweredEvent extends StudioEvent {
  type: 'tool.answered'
  turnId: string
  callId: string
  name: string
  result: string
  isError: boolean
  /** `game`: the game answered; `deadline`: nobody did in time; `turn_ended`: the turn ended first. */
  by: 'game' | 'deadline' | 'turn_ended'
  cut?: { block: number | null; result?: number }
}

export interface Agent {
  readonly name: string
  readonly options: AgentOptions
  /**
   * The studio's answer to the definition; rejects with its StudioError. A failure nothing awaits
   * (no `ready`, no send) is written to stderr (console.error), and the next send rejects with it.
   */
  readonly ready: Promise<AgentInfo>
  /** The revision of the agent's config `ready` answered with; null until it resolves. */
  readonly revision: number | null
  /** That revision's ETag (`"3"`), for `ifMatch`; null until `ready` resolves. */
  readonly etag: string | null

  /**
   * Sends the player's message; resolves with the turn once it has ended (its calls of the game's
   * tools that have a `run` here run and answered on the way).
   */
  send(content: string, options?: SendOptions): Promise<Turn>
  /**
   * The turn the send under `key` made (a failed send's `error.idempotencyKey`), as the studio has
   * it now; null when no send under that key reached the studio or ran (sending again with the same
   * key is then safe). How game code reconciles a `network_error`.
   */
  turnByIdempotencyKey(key: string): Promise<Turn | null>
  /**
   * Hears the agent's events of `type` (`'*'` for every one); returns `off`, which stops this
   * handler (the last `off` of the agent closes its socket). A handler of a known type gets that
   * event's shape; any other type, a `StudioEvent`.
   */
  on<T extends keyof StudioEvents>(type: T, handler: (event: StudioEvents[T]) => void): () => void
  on(type: string, handler: (event: StudioEvent) => void): () => void
  /** The memory store (read-only). */
  memories(options?: { atBlock?: number; limit?: number; cursor?: string }): Promise<MemoryStore>
  /** What the next model call would be given (with `atBlock`: what that block's first call was given). */
  context(options?: { atBlock?: number }): Promise<Context>
  /** A turn's cost as charged now. */
  cost(turn: Turn | string): Promise<Cost>
  /** The agent's history, oldest block first, a page at a time. */
  history(options?: { after?: number; limit?: number }): AsyncGenerator<HistoryPage, void, undefined>
  /**
   * Replays the player's messages of blocks `fromBlock`..`through` against the
   * agent's definition with `definition`'s changes; resolves once the replay
   * has ended (completed, failed or cancelled), as the studio shows it.
   */
  replay(request: ReplayRequest, options?: ReplayOptions): Promise<Replay>
  /** The agent's replays, newest first, a page (without their rows). */
  replays(options?: { limit?: number; cursor?: string }): Promise<ReplayPage>
}

export interface ReplayRequest {
  /** The first block whose player's message is played again. */
  fromBlock: number
  /** Changes to the agent's definition as it is now; absent or `{}`: none (the play should come out the same). */
  definition?: Partial<AgentOptions>
  /** The last block played again (default: the newest ended block); 50 blocks at most. */
  through?: number
}

export interface ReplayOptions {
  /** Called as each block is played. */
  onProgress?: (event: ReplayProgressEvent) => void
  /** Aborts the wait, and cancels the replay (the blocks played so far are kept). */
  signal?: AbortSignal
}

export interface ReplayProgressEvent extends StudioEvent {
  type: 'replay.progress'
  replayId: string
  /** The block just played. */
  block: number
  played: number
  total: number
}

export interface ReplaySummary {
  id: string
  agent: string
  /** The hidden copy that played the replay (readable as an agent: history, memories, context). */
  replayAgent: string
  status: 'queued' | 'running' | 'completed' | 'failed' | 'cancelled'
  fromBlock: number
  through: number
  /** The changes, as the studio took them. */
  definition: Partial<AgentOptions>
  progress: { played: number; total: number }
  /** What the copy's turns and compactions cost. */
  cost: { total: string }
  error: string | null
  /** A failed replay's reason, for code: `budget_exhausted`, `history_pruned`, `process_stopped`, … */
  errorCode: string | null
  createdAt: string
  startedAt: string | null
  endedAt: string | null
}

export interface Replay extends ReplaySummary {
  /** One row per block, fromBlock to through. */
  rows: ReplayRow[]
  /** The two stores as the last block played left them; null when they cannot be compared (then `memoriesRefused`). */
  memories: { atBlock: number; same: boolean; memories: MemoryCompared[] } | null
  memoriesRefused: string | null
}

export interface ReplayRow {
  block: number
  /** The player's message. */
  message: string | null
  /** null: no longer kept. */
  original: ReplaySide | null
  /** null: not played (yet). */
  replay: ReplaySide | null
  sameReply: boolean | null
  sameToolCalls: boolean | null
}

export interface ReplaySide {
  turnId: string | null
  status: string
  reply: string
  toolCalls: ToolCall[]
  tokens: number
  cost: Cost | null
  error: string | null
}

export interface MemoryCompared {
  name: string
  change: 'same' | 'changed' | 'added' | 'removed'
  original: { description: string; content: string; open: boolean } | null
  replay: { description: string; content: string; open: boolean } | null
  /** The content's differences, line by line (empty when it is the same). */
  lines: DiffLine[]
}

/** A line of a diff; `replaced` (the whole text, for a diff too large to compare by line) has no `text`. */
export interface DiffLine {
  op: 'same' | 'removed' | 'added' | 'replaced'
  text?: string
  beforeChars?: number
  afterChars?: number
}

export interface ReplayPage {
  replays: ReplaySummary[]
  nextCursor: string | null
}

export interface SendOptions {
  /** Leaves no trace in history; offered no memory tools. */
  transient?: boolean
  /** Streams the reply: called with each piece of text as the model writes it. */
  onText?: (text: string, event: ReplyDeltaEvent) => void
  /** Aborts the send, and cancels its turn once the studio has it. */
  signal?: AbortSignal
  /** The send's Idempotency-Key (default: a new UUID); a repeat with it never runs a second turn. */
  idempotencyKey?: string
}

export interface Turn {
  id: string
  /** A send resolves with an ended turn; `GET …/turns` also shows live ones (`waiting`: on the game's tools). */
  status: 'completed' | 'cancelled' | 'failed' | 'queued' | 'running' | 'waiting'
  transient: boolean
  /** The block the turn played; null for a transient turn. */
  block: number | null
  reply: string
  toolCalls: ToolCall[]
  cost: Cost
  compactionWaitMs: number | null
  createdAt: string
  endedAt: string | null
  /** A failed turn's reason, a sentence. */
  error?: string
  /** A failed turn's reason, for code: `budget_exhausted`, `model_error`, `model_output_invalid`, `deadline`, … */
  errorCode?: string
  /**
   * With `model_error` (or `model_output_invalid`): the failed model call's class, which `error`
   * explains with the provider's words (keys and addresses taken out).
   */
  errorClass?:
    | 'auth_refused'
    | 'rate_limited'
    | 'quota_exhausted'
    | 'model_not_found'
    | 'context_too_long'
    | 'output_refused'
    | 'output_limit'
    | 'request_refused'
    | 'provider_down'
    | 'provider_timeout'
    | 'provider_unreachable'
    | 'answer_unreadable'
    | 'not_configured'
  /**
   * A completed turn that had to stop before its model answered (out of steps, tool calls or
   * credits): its reply is the answer to one more call made with no tools offered.
   */
  cutShort?: { code: 'too_many_steps' | 'too_many_tool_calls' | 'budget_exhausted'; message: string }
  /** A waiting turn's calls of the game's tools, not answered yet. */
  pendingToolCalls?: PendingToolCall[]
}

export interface ToolCall {
  name: string
  /** Its arguments; when long, their strings cut (`cut` says so), or their text, cut. */
  arguments: Record<string, unknown> | string
  result: string
  isError: boolean
  /**
   * Set when the result, or the arguments' strings, were cut (STUDIO_SHOWN_TEXT_MAX_CHARS): their
   * whole lengths, and the block whose history has them whole (null for a transient turn).
   */
  cut?: { block: number | null; result?: number; arguments?: number }
  /** On a replay's copy: a call of a game tool the original never made (the game never answered it). */
  notInOriginal?: boolean
}

export interface Cost {
  /** Credits, a decimal string with six places. */
  total: string
  lines: CostLine[]
}

export interface CostLine {
  kind: 'model' | 'memory_access' | 'compaction' | string
  label: string
  quantity: number
  amount: string
}

/** An event as the studio sends it; `seq` grows for the agent. */
export interface StudioEvent {
  type: string
  /** Absent on a message to one listener (`error`); null on a `resync` of an agent with no events kept. */
  seq?: number | null
  /** When it was sent, ISO 8601 (UTC). */
  at?: string
  agent?: string | null
  turnId?: string | null
  [field: string]: unknown
}

/** A turn began running; `block` is null for a transient turn. */
export interface TurnStartedEvent extends StudioEvent {
  type: 'turn.started'
  turnId: string
  block: number | null
  transient: boolean
}

/** The next piece of a reply as the model writes it. */
export interface ReplyDeltaEvent extends StudioEvent {
  type: 'reply.delta'
  turnId: string
  text: string
}

/** A turn recorded a call of a memory tool (or, on a replay's copy, a game tool's), with its result. */
export interface ToolCallEvent extends StudioEvent {
  type: 'tool_call'
  turnId: string
  name: string
  /** The call's arguments (as a turn's `toolCalls` show them: cut when long, `cut` saying so). */
  arguments: Record<string, unknown> | string
  result: string
  isError: boolean
  cut?: { block: number | null; result?: number; arguments?: number }
  notInOriginal?: boolean
}

/** A turn ended, its last event; `turn` is the turn as `GET …/turns/{id}` answered it then. */
export interface TurnFinishedEvent extends StudioEvent {
  type: 'turn.finished'
  turnId: string
  status: 'completed' | 'cancelled' | 'failed'
  block: number | null
  transient: boolean
  reply: string
  error: string | null
  cost: Cost
  turn: Turn
}

/** A memory was written, opened, closed or deleted: by a turn's tool call (`turnId`), or a compaction (null). */
export interface MemoryChangedEvent extends StudioEvent {
  type: 'memory.changed'
  name: string
  change: 'created' | 'updated' | 'opened' | 'closed' | 'deleted'
  by: 'agent' | 'compactor'
  turnId: string | null
}

/** A compaction was asked for, began, or ended (`status` `done` with `throughBlock`, or `failed`). */
export interface CompactionEvent extends StudioEvent {
  type: 'compaction.queued' | 'compaction.started' | 'compaction.finished'
  compactionId: string
  reason: 'threshold' | 'forced' | 'manual'
  status: 'queued' | 'running' | 'done' | 'failed'
  error: string | null
  waitingForCredits: boolean
  throughBlock: number | null
}

/** A checkpoint was written: the context now starts from it. */
export interface CheckpointWrittenEvent extends StudioEvent {
  type: 'checkpoint.written'
  kind: 'compaction' | 'forced'
  throughBlock: number
}

/** The game's credits run low: past 80% of its monthly cap, or below its low-balance alert. */
export interface BudgetLowEvent extends StudioEvent {
  type: 'budget.low'
  trigger: 'monthlyCap' | 'lowBalanceAlert'
  balance: string
  monthlyCap?: string
  monthSpent?: string
  lowBalanceAlert?: string
}

/** A replay of the agent ended. */
export interface ReplayFinishedEvent extends StudioEvent {
  type: 'replay.finished'
  replayId: string
  status: 'completed' | 'failed' | 'cancelled'
}

/** The events after the last one heard are no longer kept: read again what you show, then carry on. */
export interface ResyncEvent extends StudioEvent {
  type: 'resync'
  /** Where to carry on from. */
  seq: number | null
  message: string
}

/**
 * The stream cannot go on (`unauthenticated`, `agent_not_found`, `websocket_unavailable`, …), or
 * pauses (`too_many_streams`, then tried again).
 */
export interface StreamErrorEvent extends StudioEvent {
  type: 'error'
  code: string
  message: string
  /** The WebSocket's close code, when the close said it and the studio did not. */
  closeCode?: number
}

/** Each event type `agent.on` knows, and the shape its handlers get. */
export interface StudioEvents {
  '*': StudioEvent
  'turn.started': TurnStartedEvent
  'reply.delta': ReplyDeltaEvent
  tool_call: ToolCallEvent
  'tool.requested': ToolRequestedEvent
  'tool.answered': ToolAnsweredEvent
  'memory.changed': MemoryChangedEvent
  'turn.finished': TurnFinishedEvent
  'compaction.queued': CompactionEvent
  'compaction.started': CompactionEvent
  'compaction.finished': CompactionEvent
  'checkpoint.written': CheckpointWrittenEvent
  'budget.low': BudgetLowEvent
  'replay.progress': ReplayProgressEvent
  'replay.finished': ReplayFinishedEvent
  resync: ResyncEvent
  error: StreamErrorEvent
}

export interface AgentInfo {
  name: string
  systemPrompt: string
  model: string
  memory: { maxOpenTokens: number } | null
  compaction: { type: 'summarize' | 'sliding-window'; maxTokens: number }
  /** The game's tools, as the studio keeps them (no `run`). */
  tools: Array<{ name: string; description: string; parameters?: Record<string, unknown>; timeoutSeconds?: number }>
  /** The config's newest revision: who defined it, from where, when. */
  revision: Revision
  createdAt: string
  updatedAt: string
  stats: {
    blocks: number
    verbatimTokens: number
    openTokens: number
    storeBytes: number
    lastCheckpoint: { kind: string; throughBlock: number; createdAt: string } | null
    [field: string]: unknown
  }
}

/** A revision of an agent's config, with who defined it. */
export interface Revision {
  number: number
  /** A user, or an API key by its label (its role when it has none) and prefix; null: not recorded. */
  by: { type: 'user'; name: string } | { type: 'apiKey'; name: string; key: string } | null
  via: 'api' | 'page' | 'admin' | 'replay' | 'import' | 'fork' | 'demo' | 'command' | 'unknown'
  /** ISO 8601; null when not kept. */
  at: string | null
  note: string
}

export interface Memory {
  name: string
  description: string
  content: string
  open: boolean
  tokens: number
  bytes: number
  version: number
  updatedAt: string
  /** Who wrote it last: the agent, the compactor, an import (its memories as installed), or the file an import came from (as of a block before it). */
  updatedBy: 'agent' | 'compactor' | 'import' | 'file'
}

export interface MemoryStore {
  memories: Memory[]
  nextCursor: string | null
  memoryEnabled: boolean
  openTokens: number
  maxOpenTokens: number
  storeBytes: number
  storeCapBytes: number
}

export interface Context {
  system: string
  contextBlock: string | null
  messages: Array<Record<string, unknown>>
  tools: string[]
  tokens: { system: number; contextBlock: number; messages: number; total: number; maxTokens: number; [part: string]: number }
  [field: string]: unknown
}

export interface HistoryPage {
  blocks: Block[]
  nextCursor: string | null
  nextAfter: number | null
}

export interface Block {
  block: number
  turnId: string | null
  status: string
  /** Taken out of the agent's verbatim history by a compaction. */
  folded: boolean
  tokens: number
  createdAt: string
  entries: Entry[]
}

export type Entry =
  | { type: 'message'; role: 'user' | 'assistant'; content: string }
  | {
      type: 'tool_call'
      name: string
      arguments: Record<string, unknown> | string
      /** null while the call waits for the game's answer (then `waitingForGame`). */
      result: string | null
      isError: boolean
      waitingForGame?: { callId: string; deadline: string; timeoutSeconds: number | null }
      notInOriginal?: boolean
    }

export interface Billing {
  balance: string
  held: string
  available: string
  monthlyCap: string | null
  monthSpent: string
  lowBalanceAlert: string | null
  prices: {
    memoryAccess: string
    models: Record<string, { inputPerMTok: string; outputPerMTok: string; cachedInputPerMTok: string }>
  }
}

/** The client's one error: the studio's error answer, or what kept one from coming. */
export class StudioError extends Error {
  constructor(fields: {
    status?: number | null
    code: string
    message: string
    details?: Array<{ field: string | null; message: string }> | null
    retryAfter?: number | null
    idempotencyKey?: string | null
    cause?: unknown
  })
  readonly name: 'StudioError'
  /** The HTTP status; for a check made here, the one the studio answers for the same mistake; null when no answer came. */
  readonly status: number | null
  /** The studio's code: `invalid_definition`, `budget_exhausted`, `agent_busy`, …; `network_error` when the studio could not be reached. */
  readonly code: string
  readonly details: Array<{ field: string | null; message: string }> | null
  /** Seconds the studio asked to wait (`Retry-After`), when it did. */
  readonly retryAfter: number | null
  /** On every error of a send: its `Idempotency-Key`, for `agent.turnByIdempotencyKey`. Else null. */
  readonly idempotencyKey: string | null
  /** The game cannot pay: `budget_exhausted`, `spend_cap_reached` or `insufficient_credits`. */
  readonly outOfCredits: boolean
}

/** The codes `error.outOfCredits` is true for. */
export const OUT_OF_CREDITS: readonly string[]
