/**
 * deferflow's built-in triggers (the package export "deferflow/triggers").
 *
 * BUILTIN_TRIGGERS are the classes a triggerer allows by default. TimeDeltaTrigger is exported for
 * operators to defer with, but it serializes as a DateTimeTrigger (as in Airflow), so no trigger
 * row ever names it and it is not in the list. SensorPokeTrigger (the consolidated sensor wait)
 * is in it: every triggerer can run it, for the sensor classes it allows.
 */
import { DateTimeTrigger } from './date-time-trigger.ts';
import { FileTrigger } from './file-trigger.ts';
import { HttpTrigger } from './http-trigger.ts';
import { SqlTrigger } from './sql-trigger.ts';
import { MqttTrigger } from './mqtt-trigger.ts';
import { NatsJetStreamTrigger } from './nats-jetstream-trigger.ts';
import { RabbitMqTrigger } from './rabbitmq-trigger.ts';
import { RedisStreamTrigger } from './redis-stream-trigger.ts';
import { TableRowsTrigger } from './table-rows-trigger.ts';
import { TaskStateTrigger } from './task-state-trigger.ts';
import { SensorPokeTrigger } from '../src/authoring/sensors/sensor-poke-trigger.ts';
import { SignalTrigger } from '../src/authoring/triggers/signal-trigger.ts';
import { AllOfTrigger, AnyOfTrigger } from '../src/authoring/triggers/composite-trigger.ts';
import type { TriggerClass } from '../src/authoring/triggers/base-trigger.ts';

export { DateTimeTrigger, type MomentInput } from './date-time-trigger.ts';
export { FileTrigger, readyFile, type FileTriggerKwargs } from './file-trigger.ts';
export { FileSensor, type FileSensorOptions } from './file-sensor.ts';
export { DateTimeSensor, TimeDeltaSensor, TimeSensor, type RunDates } from './time-sensors.ts';
export { HttpTrigger, type HttpAnswer, type HttpCheck, type HttpTriggerKwargs } from './http-trigger.ts';
export { HttpSensor } from './http-sensor.ts';
export { SqlTrigger, type SqlCheck, type SqlTriggerKwargs } from './sql-trigger.ts';
export { SqlSensor } from './sql-sensor.ts';
export { MqttTrigger, type MqttMessage, type MqttTriggerKwargs } from './mqtt-trigger.ts';
export { NatsJetStreamTrigger, type NatsJetStreamMessage, type NatsJetStreamTriggerKwargs } from './nats-jetstream-trigger.ts';
export { RabbitMqTrigger, type RabbitMqMessage, type RabbitMqTriggerKwargs } from './rabbitmq-trigger.ts';
export { RedisStreamTrigger, type RedisStreamMessage, type RedisStreamTriggerKwargs } from './redis-stream-trigger.ts';
export { TableRowsTrigger, type TableRowEvent, type TableRowsTriggerKwargs } from './table-rows-trigger.ts';
export { TimeDeltaTrigger } from './time-delta-trigger.ts';
export { SignalTrigger, type SignalEvent, type SignalTriggerKwargs } from '../src/authoring/triggers/signal-trigger.ts';
export { AllOfTrigger, AnyOfTrigger, allOf, anyOf } from '../src/authoring/triggers/composite-trigger.ts';
export { TaskStateTrigger, type TaskStateCheck, type TaskStateEvent, type TaskStateTriggerKwargs } from './task-state-trigger.ts';
export { ExternalTaskSensor, type ExternalTaskSensorOptions, type LogicalDateFn } from './external-task-sensor.ts';

/**
 * The registry's view of a trigger class: constructible from the JSON kwargs it stored. The
 * built-ins' constructors are typed for operators (a Date or luxon DateTime is accepted too), so
 * TypeScript does not see them as `new (kwargs: JsonObject)`; at run time they validate whatever
 * they are given, which is what makes this cast sound.
 */
function asTriggerClass<C extends abstract new (...args: never[]) => unknown>(cls: C): C & TriggerClass {
  return cls as unknown as C & TriggerClass;
}

export const BUILTIN_TRIGGERS = [
  asTriggerClass(DateTimeTrigger),
  asTriggerClass(FileTrigger),
  asTriggerClass(HttpTrigger),
  asTriggerClass(SqlTrigger),
  asTriggerClass(MqttTrigger),
  asTriggerClass(NatsJetStreamTrigger),
  asTriggerClass(RabbitMqTrigger),
  asTriggerClass(RedisStreamTrigger),
  asTriggerClass(TableRowsTrigger),
  asTriggerClass(TaskStateTrigger),
  asTriggerClass(SensorPokeTrigger),
  asTriggerClass(SignalTrigger),
  asTriggerClass(AnyOfTrigger),
  asTriggerClass(AllOfTrigger),
] as const;
