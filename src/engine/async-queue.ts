/**
 * A single-consumer async queue: producers push values or end it (with or without an
 * error); the consumer iterates. `size` lets the producer apply backpressure.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #head = 0;
  #ended = false;
  #error: unknown = undefined;
  #waiter: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  #onDrain: ((size: number) => void) | undefined;
  #iterating = false;

  constructor(onDrain?: (size: number) => void) {
    this.#onDrain = onDrain;
  }

  get size(): number {
    return this.#items.length - this.#head;
  }

  get iterating(): boolean {
    return this.#iterating;
  }

  get ended(): boolean {
    return this.#ended;
  }

  push(value: T): void {
    if (this.#ended) return;
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      w.resolve({ value, done: false });
      return;
    }
    this.#items.push(value);
  }

  end(error?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#error = error;
    if (this.#waiter && this.size === 0) {
      const w = this.#waiter;
      this.#waiter = undefined;
      if (error !== undefined) w.reject(error);
      else w.resolve({ value: undefined, done: true });
    }
  }

  #shift(): T {
    const v = this.#items[this.#head] as T;
    this.#items[this.#head] = undefined as T;
    this.#head++;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return v;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.size > 0) {
      const value = this.#shift();
      this.#onDrain?.(this.size);
      return Promise.resolve({ value, done: false });
    }
    if (this.#ended) {
      if (this.#error !== undefined) {
        const e = this.#error;
        this.#error = undefined; // throw once, then report done
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
      this.#onDrain?.(0);
    });
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.#iterating) throw new TypeError('This stream can only be iterated once');
    this.#iterating = true;
    return { next: () => this.next(), return: async () => ({ value: undefined, done: true }) };
  }
}
