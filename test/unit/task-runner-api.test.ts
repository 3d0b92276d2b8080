import { describe, expect, it } from 'vitest';
import * as publicApi from '../../src/authoring/public-api.ts';
import { LOADED_BY_OTHERS, LOADED_ON_FIRST_CALL } from '../../src/authoring/user-code/task-runner-api.ts';
import * as index from '../../src/index.ts';

/** True where deferflow's export `name` is a function that returns a promise: a task runner may load the rest of deferflow on its first call. */
type ReturnsPromise<Name extends keyof typeof index> = (typeof index)[Name] extends (...args: never[]) => Promise<unknown> ? true : false;
// The type check fails here if one of them stops returning a promise.
const returnPromises: { [Name in (typeof LOADED_ON_FIRST_CALL)[number]]: ReturnsPromise<Name> } = {
  latestSignalVersion: true,
  listSignals: true,
  listenSignal: true,
  sendSignal: true,
  deferTaskInstance: true,
  resumeTaskInstance: true,
  createTaskInstance: true,
  readTaskInstance: true,
  deferflow: true,
};

describe('deferflow in a task runner (the authoring API, the rest on use)', () => {
  it('has every name deferflow exports: the authoring API, and each other name under how a runner loads it', () => {
    const inRunner = [...Object.keys(publicApi), ...LOADED_ON_FIRST_CALL, ...LOADED_BY_OTHERS];
    expect(new Set(inRunner).size).toBe(inRunner.length);
    expect(inRunner.sort()).toEqual(Object.keys(index).sort());
    expect(Object.keys(returnPromises).sort()).toEqual([...LOADED_ON_FIRST_CALL].sort());
    const exported: Record<string, unknown> = { ...index };
    for (const name of LOADED_ON_FIRST_CALL) expect(typeof exported[name]).toBe('function');
  });
});
