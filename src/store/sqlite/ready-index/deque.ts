/**
 * A FIFO queue on a ring buffer: `push` and `shift` are O(1) (amortized for growth),
 * where `Array.prototype.shift` moves every element. The buffer doubles when full and
 * halves when a quarter used, so a drained backlog gives its memory back.
 */
export class Deque<T> {
  #items: (T | undefined)[];
  #head = 0;
  #size = 0;
  readonly #minCapacity: number;

  constructor(initialCapacity = 16) {
    let capacity = 4;
    while (capacity < initialCapacity) capacity *= 2;
    this.#minCapacity = capacity;
    this.#items = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.#size;
  }

  push(item: T): void {
    if (this.#size === this.#items.length) this.#resize(this.#items.length * 2);
    this.#items[(this.#head + this.#size) & (this.#items.length - 1)] = item;
    this.#size++;
  }

  /** Adds an item in front of the oldest. */
  unshift(item: T): void {
    if (this.#size === this.#items.length) this.#resize(this.#items.length * 2);
    this.#head = (this.#head - 1) & (this.#items.length - 1);
    this.#items[this.#head] = item;
    this.#size++;
  }

  /** Removes and returns the oldest item, or undefined when empty. */
  shift(): T | undefined {
    if (this.#size === 0) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) & (this.#items.length - 1);
    this.#size--;
    if (this.#items.length > this.#minCapacity && this.#size <= this.#items.length >>> 2) {
      this.#resize(this.#items.length >>> 1);
    }
    return item;
  }

  /** The oldest item without removing it, or undefined when empty. */
  peek(): T | undefined {
    return this.#size === 0 ? undefined : this.#items[this.#head];
  }

  /** Keeps only the items for which `keep` is true, in order. O(n). */
  retain(keep: (item: T) => boolean): void {
    const kept: T[] = [];
    for (const item of this) if (keep(item)) kept.push(item);
    let capacity = this.#minCapacity;
    while (capacity < kept.length * 2) capacity *= 2;
    this.#items = new Array<T | undefined>(capacity);
    for (let i = 0; i < kept.length; i++) this.#items[i] = kept[i];
    this.#head = 0;
    this.#size = kept.length;
  }

  clear(): void {
    this.#items = new Array<T | undefined>(this.#minCapacity);
    this.#head = 0;
    this.#size = 0;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    const mask = this.#items.length - 1;
    for (let i = 0; i < this.#size; i++) yield this.#items[(this.#head + i) & mask] as T;
  }

  #resize(capacity: number): void {
    const items = new Array<T | undefined>(capacity);
    const mask = this.#items.length - 1;
    for (let i = 0; i < this.#size; i++) items[i] = this.#items[(this.#head + i) & mask];
    this.#items = items;
    this.#head = 0;
  }
}
