import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { TriggerModuleError, UnknownSensorError, UnknownTriggerError } from '../../vocabulary/errors.ts';
import { isSensorClass, sensorClasspathOf, type SensorClass } from '../sensors/sensor-class.ts';
import { explainLoadFailure } from '../user-code/explain-load-failure.ts';
import { registerTypeScriptImportHooks } from '../user-code/typescript-hooks.ts';
import { exportsOf, importUserModule } from '../user-code/user-module.ts';
import { classpathOf, isTriggerClass, type TriggerClass } from './base-trigger.ts';

/**
 * The allow-list of trigger code a triggerer may run. A trigger row names a classpath; the
 * triggerer only ever constructs a class registered here: the built-ins plus the exports of the
 * modules whoever runs it named with --trigger-module. A row naming anything else fails its
 * task instances; nothing in a row is ever imported or eval'd.
 */
export class TriggerRegistry {
  readonly #classes = new Map<string, TriggerClass>();
  /** Sensor classes whose poke a consolidated sensor wait may run here (exported by the same modules). */
  readonly #sensors = new Map<string, SensorClass>();

  constructor(classes: Iterable<TriggerClass> = []) {
    for (const cls of classes) this.register(cls, 'built-in');
  }

  /** Allows a trigger class (by its classpath); `origin` names where it came from, for the error when two classes claim one classpath. */
  register(cls: TriggerClass, origin: string): void {
    const classpath = classpathOf(cls);
    const existing = this.#classes.get(classpath);
    if (existing && existing !== cls) {
      throw new TriggerModuleError(
        `${origin}: classpath ${JSON.stringify(classpath)} is already taken by another class; give one of them a distinct static classpath`,
      );
    }
    this.#classes.set(classpath, cls);
  }

  /** Allows a sensor class to be poked by the triggerer (deferrable mode), by its classpath. */
  registerSensor(cls: SensorClass, origin: string): void {
    const classpath = sensorClasspathOf(cls);
    const existing = this.#sensors.get(classpath);
    if (existing && existing !== cls) {
      throw new TriggerModuleError(
        `${origin}: sensor classpath ${JSON.stringify(classpath)} is already taken by another class; give one of them a distinct static classpath`,
      );
    }
    this.#sensors.set(classpath, cls);
  }

  /** The sensor class of a classpath, or DF_UNKNOWN_SENSOR naming the allowed ones. */
  resolveSensor(classpath: string): SensorClass {
    const cls = this.#sensors.get(classpath);
    if (!cls) throw new UnknownSensorError(classpath, [...this.#sensors.keys()].sort());
    return cls;
  }

  /**
   * Imports a module (a file path, resolved from the working directory, or a package name,
   * resolved from the working directory's project) and registers every BaseTrigger subclass it
   * exports. TypeScript and CommonJS files load without a build step.
   */
  async loadModule(specifier: string): Promise<string[]> {
    const isPath = specifier.startsWith('.') || path.isAbsolute(specifier) || /\.[cm]?[jt]s$/.test(specifier);
    let exports: Record<string, unknown>;
    try {
      exports = isPath ? (await importUserModule(path.resolve(specifier), 'trigger-module', { shared: true })).exports : await importPackage(specifier);
    } catch (error) {
      throw new TriggerModuleError(
        `trigger module ${JSON.stringify(specifier)} could not be loaded: ${explainLoadFailure(isPath ? specifier : path.join(process.cwd(), 'package.json'), error)}`,
        {
          cause: error,
        },
      );
    }
    const found = Object.values(exports).filter(isTriggerClass);
    const sensors = Object.values(exports).filter(isSensorClass);
    if (found.length === 0 && sensors.length === 0) {
      throw new TriggerModuleError(`trigger module ${JSON.stringify(specifier)} exports no BaseTrigger subclass and no sensor class`);
    }
    for (const cls of found) this.register(cls, `trigger module ${specifier}`);
    for (const cls of sensors) this.registerSensor(cls, `trigger module ${specifier}`);
    return [...found.map(classpathOf), ...sensors.map((cls) => `sensor ${sensorClasspathOf(cls)}`)];
  }

  /** The trigger class of a classpath, or DF_UNKNOWN_TRIGGER naming the allowed ones. */
  resolve(classpath: string): TriggerClass {
    const cls = this.#classes.get(classpath);
    if (!cls) throw new UnknownTriggerError(classpath, this.classpaths);
    return cls;
  }

  /** Every trigger classpath allowed, sorted. */
  get classpaths(): string[] {
    return [...this.#classes.keys()].sort();
  }
}

/**
 * A package's exports, resolved from the working directory's project (where the user installed
 * it), not from wherever deferflow is installed. A package that only exports an `import`
 * condition cannot be resolved by require.resolve; deferflow's own resolution is the fallback.
 */
async function importPackage(name: string): Promise<Record<string, unknown>> {
  await registerTypeScriptImportHooks();
  let url = name;
  try {
    url = pathToFileURL(createRequire(path.join(process.cwd(), 'package.json')).resolve(name)).href;
  } catch {
    // Not resolvable with require's conditions: let import() resolve it.
  }
  return exportsOf(await import(url));
}
