/** One time a task instance's try ended up_for_reschedule (a sensor gave its slot back between pokes). */
export interface TaskReschedule {
  /** The try that was rescheduled. */
  readonly tryNumber: number;
  /** Epoch ms: when the run (the poke) started. */
  readonly startDate: number;
  /** Epoch ms: when it ended. */
  readonly endDate: number;
  /** Epoch ms: when the task instance may run again. */
  readonly rescheduleDate: number;
}
