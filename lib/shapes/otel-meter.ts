/**
 * The shapes of OpenTelemetry the library uses, typed here so that it needs `@opentelemetry/api`
 * only when an app brings it; the options and the metrics service both sit above this file.
 */

/** The part of an OpenTelemetry `MeterProvider` the library uses (`@opentelemetry/api`). */
export interface OtelMeterProvider {
  getMeter(name: string, version?: string): OtelMeter;
}

/** The part of an OpenTelemetry `Meter` the library uses. */
export interface OtelMeter {
  createCounter(name: string, options?: object): { add(value: number, attributes?: object): void };
  createHistogram(
    name: string,
    options?: object,
  ): { record(value: number, attributes?: object): void };
  createObservableGauge(
    name: string,
    options?: object,
  ): {
    addCallback(callback: (result: { observe(value: number): void }) => unknown): void;
    removeCallback(callback: (result: { observe(value: number): void }) => unknown): void;
  };
}
