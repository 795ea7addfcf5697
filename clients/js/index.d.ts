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
   * Checks the spec's definition-time rule at once (throws a StudioError,
   * code `invalid_definition`) and defines the agent on the studio in the
   * background (`ready`). The same options as this io's last definition of
   * the name send nothing.
   */
  new (name: string, options?: AgentOptions): Agent
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
}

export interface Agent {
  readonly name: string
  readonly options: AgentOptions
  /** The studio's answer to the definition; rejects with its StudioError. */
  readonly ready: Promise<AgentInfo>

  /** Sends the player's message; resolves with the turn once it has ended. */
  send(content: string, options?: SendOptions): Promise<Turn>
  /** Hears the agent's events of `type` (`'*'` for every one); returns `off`. */
  on<T extends string>(type: T, handler: (event: StudioEvent & { type: T extends '*' ? string : T }) => void): () => void
  /** The memory store (read-only). */
  memories(options?: { atBlock?: number; limit?: number; cursor?: string }): Promise<MemoryStore>
  /** What the next model call would be given (with `atBlock`: what that block's first call was given). */
  context(options?: { atBlock?: number }): Promise<Context>
  /** A turn's cost as charged now. */
  cost(turn: Turn | string): Promise<Cost>
  /** The agent's history, oldest block first, a page at a time. */
  history(options?: { after?: number; limit?: number }): AsyncGenerator<HistoryPage, void, undefined>
}

export interface SendOptions {
  /** Leaves no trace in history; offered no memory tools. */
  transient?: boolean
  /** Streams the reply: called with each piece of text as the model writes it. */
  onText?: (text: string, event: StudioEvent) => void
  /** Aborts the send, and cancels its turn once the studio has it. */
  signal?: AbortSignal
  /** The send's Idempotency-Key (default: a new UUID); a repeat with it never runs a second turn. */
  idempotencyKey?: string
}

export interface Turn {
  id: string
  status: 'completed' | 'cancelled' | 'failed' | 'queued' | 'running'
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
  /** A failed turn's reason, for code: `budget_exhausted`, `model_error`, `deadline`, … */
  errorCode?: string
}

export interface ToolCall {
  name: string
  arguments: Record<string, unknown>
  result: string
  isError: boolean
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
  seq?: number
  at?: string
  agent?: string
  turnId?: string
  [field: string]: unknown
}

export interface AgentInfo {
  name: string
  systemPrompt: string
  model: string
  memory: { maxOpenTokens: number } | null
  compaction: { type: 'summarize' | 'sliding-window'; maxTokens: number }
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

export interface Memory {
  name: string
  description: string
  content: string
  open: boolean
  tokens: number
  bytes: number
  version: number
  updatedAt: string
  updatedBy: 'agent' | 'compactor'
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
  | { type: 'tool_call'; name: string; arguments: Record<string, unknown>; result: string; isError: boolean }

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
  /** The HTTP status; for a check made here, the one the studio answers for the same mistake; null when no answer came. */
  readonly status: number | null
  /** The studio's code: `invalid_definition`, `budget_exhausted`, `agent_busy`, …; `network_error` when the studio could not be reached. */
  readonly code: string
  readonly details: Array<{ field: string | null; message: string }> | null
  /** Seconds the studio asked to wait (`Retry-After`), when it did. */
  readonly retryAfter: number | null
}
