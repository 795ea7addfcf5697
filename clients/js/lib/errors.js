// The client's one error: the studio's error shape, or what stood in its way.

// The codes of a refusal for want of credits: the game's balance (less
// what its running turns hold), its monthly spend cap, or the compaction
// the agent needs before it can be sent to, which the game cannot pay for.
export const OUT_OF_CREDITS = Object.freeze(['budget_exhausted', 'spend_cap_reached', 'insufficient_credits'])

export class StudioError extends Error {
  /**
   * @param {object} fields
   * @param {number|null} [fields.status] the HTTP status (the one the studio
   *   answers for the same mistake, for a check made here; null when no
   *   answer came)
   * @param {string} fields.code the studio's code (`invalid_definition`, …)
   * @param {string} fields.message a sentence a person can act on
   * @param {Array<{field: string|null, message: string}>|null} [fields.details]
   * @param {number|null} [fields.retryAfter] seconds, from `Retry-After`
   * @param {string|null} [fields.idempotencyKey] a send's `Idempotency-Key`,
   *   on every error of a send: `agent.turnByIdempotencyKey(key)` finds the
   *   turn the send made, if it reached the studio
   * @param {unknown} [fields.cause]
   */
  constructor({ status = null, code, message, details = null, retryAfter = null, idempotencyKey = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'StudioError'
    this.status = status
    this.code = code
    this.details = details
    this.retryAfter = retryAfter
    this.idempotencyKey = idempotencyKey
  }

  /** The game cannot pay: out of credits, or at its monthly spend cap (whichever code says it). */
  get outOfCredits() {
    return OUT_OF_CREDITS.includes(this.code)
  }
}

/** The StudioError an error answer carries (its body is read here). */
export async function errorOfResponse(response) {
  const retryAfter = retryAfterOf(response)
  let text = ''
  try {
    text = await response.text()
  } catch {
    // the body broke off: the status says enough
  }
  let error = null
  try {
    error = JSON.parse(text).error
  } catch {
    // not the studio's JSON: a proxy's page, say
  }
  if (error && typeof error.code === 'string') {
    return new StudioError({
      status: response.status,
      code: error.code,
      message: error.message ?? `The studio answered ${response.status}.`,
      details: error.details ?? null,
      retryAfter,
    })
  }
  return new StudioError({
    status: response.status,
    code: 'http_error',
    message: `The studio answered ${response.status} ${response.statusText}`.trim() + (text ? `: ${text.slice(0, 200)}` : '.'),
    retryAfter,
  })
}

export function retryAfterOf(response) {
  const value = response.headers.get('retry-after')
  if (value == null) return null
  const seconds = Number(value)
  if (Number.isFinite(seconds)) return Math.max(seconds, 0)
  const date = Date.parse(value)
  return Number.isNaN(date) ? null : Math.max((date - Date.now()) / 1000, 0)
}
