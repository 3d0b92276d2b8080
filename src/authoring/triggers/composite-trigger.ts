import { InvalidTriggerArgumentError } from '../../vocabulary/errors.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';
import { BaseTrigger, classpathOf, type SerializedTrigger, type TriggerClass } from './base-trigger.ts';
import type { TriggerEvent } from './trigger-event.ts';

/**
 * Composite waits: `anyOf([...])` fires when its first member does, `allOf([...])` when every
 * member has; they nest, and go wherever a trigger goes (`defer({ trigger: anyOf([...]) })`).
 *
 * A composite is stored as a trigger row of its own (its members' tree in its kwargs), which the
 * waiting task instances point at; each leaf member is an ordinary trigger row, shared with any
 * identical wait (one DateTimeTrigger for one moment, whoever waits on it), linked to the
 * composite in trigger_member. A member's outcome is recorded there in the transaction that
 * records its firing, and the composite's task instances move in that same transaction once its
 * tree is satisfied: the event an anyOf resumes its task with is `{ index, event }` (which member
 * fired, and its event), an allOf's `{ events: [...] }` (each member's, in order). Members no
 * other wait needs are then deleted, so their triggerers stop them (cleanup() runs). A member
 * that fails fails the task, as a trigger of its own would. The task's `timeout` bounds the whole.
 *
 * The composite's own row is claimed and held by a triggerer like any other, so its ownership
 * moves with the rest on a failover; the triggerer holds it without running it (no generator:
 * see TriggerRunner), and its run() only sleeps, for anything else that runs it.
 */
export abstract class CompositeTrigger extends BaseTrigger {
  /** The members as stored: leaves, or nested composites. */
  readonly members: readonly SerializedTrigger[];

  constructor(kwargs: { members: readonly (SerializedTrigger | BaseTrigger)[] }, kind: string) {
    super();
    const members = kwargs?.members;
    if (!Array.isArray(members) || members.length === 0) {
      throw new InvalidTriggerArgumentError(kind, 'expected a non-empty array of triggers (anyOf([a, b]), allOf([a, b]))');
    }
    this.members = members.map((member, index) => {
      // By shape, not instanceof: a DAG file loaded as CommonJS has its own copy of BaseTrigger.
      const serialized = typeof (member as BaseTrigger)?.serialize === 'function' ? (member as BaseTrigger).serialize() : (member as SerializedTrigger);
      if (typeof serialized?.classpath !== 'string' || serialized.classpath === '' || typeof serialized.kwargs !== 'object' || serialized.kwargs === null) {
        throw new InvalidTriggerArgumentError(kind, `member ${index} is not a trigger (expected a BaseTrigger or {classpath, kwargs})`);
      }
      // A nested composite is checked as it is built, so a bad tree fails where defer() is called.
      if (isCompositeClasspath(serialized.classpath)) compositeOf(serialized);
      return { classpath: serialized.classpath, kwargs: serialized.kwargs };
    });
    const leaves = leafMembers({ classpath: '', kwargs: { members: this.members as unknown as JsonValue[] } }).length;
    if (leaves > MAX_COMPOSITE_LEAVES) {
      throw new InvalidTriggerArgumentError(kind, `has ${leaves} member triggers; a composite wait takes at most ${MAX_COMPOSITE_LEAVES}`);
    }
  }

  /** Its members' tree, as stored, under its class's classpath. */
  override serialize(): SerializedTrigger {
    return { classpath: classpathOf(this.constructor as TriggerClass), kwargs: { members: this.members as unknown as JsonValue[] } };
  }

  /**
   * Never fires by itself: its members' outcomes resolve it (see move-deferred-task-instances.ts).
   * It sleeps until its triggerer stops it (the sleep is on the triggerer's one shared timer).
   */
  // biome-ignore lint/correctness/useYield: a composite never yields; its members' outcomes resolve it
  override async *run(): AsyncGenerator<TriggerEvent, void, void> {
    for (;;) await this.sleep(WAIT_SLICE_MS);
  }
}

/** Fires when the first of its members does: resumes with `{ index, event }`. */
export class AnyOfTrigger extends CompositeTrigger {
  /** The classpath its rows carry. */
  static readonly classpath = 'deferflow.triggers.AnyOf';

  constructor(kwargs: { members: readonly (SerializedTrigger | BaseTrigger)[] }) {
    super(kwargs, 'anyOf');
  }
}

/** Fires once every member has: resumes with `{ events: [...] }`, in the members' order. */
export class AllOfTrigger extends CompositeTrigger {
  /** The classpath its rows carry. */
  static readonly classpath = 'deferflow.triggers.AllOf';

  constructor(kwargs: { members: readonly (SerializedTrigger | BaseTrigger)[] }) {
    super(kwargs, 'allOf');
  }
}

/** Waits for whichever of `triggers` fires first; the task resumes with `{ index, event }`. */
export function anyOf(triggers: readonly BaseTrigger[]): AnyOfTrigger {
  return new AnyOfTrigger({ members: triggers });
}

/** Waits until every one of `triggers` has fired; the task resumes with `{ events: [...] }`, in order. */
export function allOf(triggers: readonly BaseTrigger[]): AllOfTrigger {
  return new AllOfTrigger({ members: triggers });
}

/** The most leaf triggers one composite wait may have. */
export const MAX_COMPOSITE_LEAVES = 100;
/** How long a composite's own run sleeps between looks at its signal (it only waits to be stopped). */
const WAIT_SLICE_MS = 24 * 3600 * 1000;

/** Whether a classpath names a composite (anyOf, allOf). */
export function isCompositeClasspath(classpath: string): boolean {
  return classpath === AnyOfTrigger.classpath || classpath === AllOfTrigger.classpath;
}

/** A stored composite as a tree: its kind, and its members (leaves, or nested composites). */
interface CompositeNode {
  readonly all: boolean;
  readonly members: readonly SerializedTrigger[];
}

function compositeOf(serialized: SerializedTrigger): CompositeNode {
  const members = (serialized.kwargs as { members?: unknown }).members;
  if (!Array.isArray(members) || members.length === 0) {
    throw new InvalidTriggerArgumentError(serialized.classpath, 'a composite wait needs a non-empty members array');
  }
  return { all: serialized.classpath === AllOfTrigger.classpath, members: members as SerializedTrigger[] };
}

/** The leaf triggers of a composite, depth first: member_index is the place in this list. */
export function leafMembers(composite: SerializedTrigger): SerializedTrigger[] {
  const leaves: SerializedTrigger[] = [];
  const visit = (node: SerializedTrigger): void => {
    for (const member of compositeOf(node).members) {
      if (isCompositeClasspath(member.classpath)) visit(member);
      else leaves.push(member);
    }
  };
  visit(composite);
  return leaves;
}

/**
 * What a composite resumes its task instances with, given the outcomes (JSON text) of the leaves
 * that fired so far, by member_index; null while it is not satisfied. An anyOf takes its lowest
 * satisfied member (members firing in one batch resolve it the same way every time).
 */
export function compositeOutcome(composite: SerializedTrigger, outcomes: ReadonlyMap<number, string>): string | null {
  let next = 0;
  const evaluate = (node: SerializedTrigger): string | null => {
    const { all, members } = compositeOf(node);
    const results = members.map((member) => (isCompositeClasspath(member.classpath) ? evaluate(member) : (outcomes.get(next++) ?? null)));
    if (all) return results.every((result) => result !== null) ? `{"events":[${results.join(',')}]}` : null;
    const index = results.findIndex((result) => result !== null);
    return index < 0 ? null : `{"index":${index},"event":${results[index]}}`;
  };
  return evaluate(composite);
}
