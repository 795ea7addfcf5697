// An agent's options checked when it is constructed — their names and JSON
// types — against the studio's own definition schema, which this client
// ships (definition-schema.json, written from the studio's OpenAPI schema
// and kept equal to it by the studio's tests). A misspelt option or a
// number sent as a string is refused here, at once, with a did-you-mean,
// instead of in the background (or, for a misspelling the studio would
// not see, never). Bounds, patterns and the rules between fields are the
// studio's to check: `ready` rejects with its answer.

import { createRequire } from 'node:module'

import { StudioError } from './errors.js'

const SCHEMA = createRequire(import.meta.url)('./definition-schema.json')
// What a refusal's message names at most (its details hold them all).
const MESSAGE_PROBLEMS = 5

/**
 * Throws the StudioError the studio would answer (400
 * `invalid_definition`, a `{ field, message }` per problem in `details`)
 * when `options` hold a name the definition does not have or a value of
 * the wrong JSON type. `tools` is this client's shape — the game's tools by
 * name, each with its `run` — and its entries are checked as the studio's
 * tool definitions; a `tools` of another shape is `toolsOf`'s to refuse.
 */
export function optionsCheck(agentName, options) {
  const problems = []
  const { tools, ...rest } = options
  objectCheck(rest, SCHEMA, '', problems)
  if (isObject(tools)) {
    const { name: _name, ...toolSchema } = SCHEMA.properties.tools.items.properties
    const item = {
      ...SCHEMA.properties.tools.items,
      properties: toolSchema,
      required: (SCHEMA.properties.tools.items.required ?? []).filter((field) => field !== 'name'),
    }
    for (const [toolName, tool] of Object.entries(tools)) {
      if (!isObject(tool)) continue
      const { run: _run, ...definition } = tool
      objectCheck(definition, item, `tools.${toolName}`, problems)
    }
  }
  if (!problems.length) return
  const sentences = problems.map(({ field, message }) => `${field}: ${message}`)
  const more = sentences.length > MESSAGE_PROBLEMS ? `; and ${sentences.length - MESSAGE_PROBLEMS} more` : ''
  throw new StudioError({
    status: 400,
    code: 'invalid_definition',
    message: `new io.Agent('${agentName}', options): ${sentences.slice(0, MESSAGE_PROBLEMS).join('; ')}${more}`,
    details: problems,
  })
}

function check(value, schema, path, problems) {
  if (value === null) {
    if (!schema.nullable && schema.type) problems.push({ field: path, message: `must be ${expected(schema)}, not null` })
    return
  }
  switch (schema.type) {
    case 'object':
      if (!isObject(value)) {
        return problems.push({ field: path, message: `must be an object, not ${kindOf(value)}` })
      }
      return objectCheck(value, schema, path, problems)
    case 'array':
      if (!Array.isArray(value)) {
        return problems.push({ field: path, message: `must be a list, not ${kindOf(value)}` })
      }
      value.forEach((item, index) => check(item, schema.items ?? {}, `${path}[${index}]`, problems))
      return
    case 'string':
      if (typeof value !== 'string') {
        return problems.push({ field: path, message: `must be a string, not ${kindOf(value)}` })
      }
      break
    case 'integer':
      if (!Number.isInteger(value)) {
        return problems.push({ field: path, message: `must be a whole number, not ${kindOf(value)}` })
      }
      break
    case 'boolean':
      if (typeof value !== 'boolean') {
        return problems.push({ field: path, message: `must be true or false, not ${kindOf(value)}` })
      }
      break
    default: // no type: any JSON value (a tool's `parameters`)
  }
  if (schema.enum && !schema.enum.includes(value)) {
    const near = nearest(String(value), schema.enum)
    problems.push({
      field: path,
      message:
        `"${value}" is not a valid choice; the choices are ${schema.enum.map((c) => `"${c}"`).join(', ')}` +
        (near ? `; did you mean "${near}"?` : '.'),
    })
  }
}

function objectCheck(value, schema, path, problems) {
  const fields = Object.keys(schema.properties ?? {})
  for (const [key, item] of Object.entries(value)) {
    const where = path ? `${path}.${key}` : key
    if (item === undefined) continue // left out, as JSON leaves it
    if (!Object.hasOwn(schema.properties ?? {}, key)) {
      if (schema.additionalProperties === false) {
        const near = nearest(key, fields) ?? nearestWithin(key, schema, path)
        problems.push({
          field: where,
          message: near
            ? `is not an option; did you mean '${near}'?`
            : `is not an option; the options are ${fields.join(', ')}`,
        })
      }
      continue
    }
    check(item, schema.properties[key], where, problems)
  }
  for (const key of schema.required ?? []) {
    if (value[key] === undefined) problems.push({ field: path ? `${path}.${key}` : key, message: 'is required' })
  }
}

/** A field of one of this object's objects that `key` likely meant, by its path (`compaction.maxTokens`). */
function nearestWithin(key, schema, path) {
  for (const [name, field] of Object.entries(schema.properties ?? {})) {
    const near = field.type === 'object' && nearest(key, Object.keys(field.properties ?? {}))
    if (near) return path ? `${path}.${name}.${near}` : `${name}.${near}`
  }
  return null
}

/**
 * The name in `names` that `key` likely meant: its camelCase (a
 * snake_case key), the same name in another case, or one a character or
 * two away (a letter dropped, added, changed, or two swapped); null when
 * none is that close.
 */
export function nearest(key, names) {
  const camel = key.replace(/_([a-z0-9])/g, (_, letter) => letter.toUpperCase())
  if (names.includes(camel)) return camel
  const lower = key.toLowerCase()
  let best = null
  let bestDistance = Infinity
  for (const name of names) {
    const distance = editDistance(lower, name.toLowerCase())
    const allowed = Math.max(1, Math.floor(Math.max(name.length, key.length) / 4))
    if (distance <= allowed && distance < bestDistance) {
      best = name
      bestDistance = distance
    }
  }
  return best
}

/** Edits from `a` to `b`: inserts, deletes, changes, and swaps of neighbours (optimal string alignment). */
function editDistance(a, b) {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)])
  for (let j = 1; j <= b.length; j += 1) rows[0][j] = j
  for (let i = 1; i <= a.length; i += 1) {
    for (let j = 1; j <= b.length; j += 1) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      rows[i][j] = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        rows[i][j] = Math.min(rows[i][j], rows[i - 2][j - 2] + 1)
      }
    }
  }
  return rows[a.length][b.length]
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

function kindOf(value) {
  if (Array.isArray(value)) return 'a list'
  if (typeof value === 'string') {
    return `the string ${JSON.stringify(value.length > 40 ? value.slice(0, 39) + '…' : value)}`
  }
  if (typeof value === 'number') return `the number ${value}`
  if (typeof value === 'boolean') return String(value)
  if (typeof value === 'function') return 'a function'
  if (value === null) return 'null'
  if (typeof value === 'object') return 'an object'
  return typeof value
}

const EXPECTED = {
  object: 'an object',
  array: 'a list',
  string: 'a string',
  integer: 'a whole number',
  boolean: 'true or false',
}

function expected(schema) {
  return EXPECTED[schema.type] ?? 'a value'
}
