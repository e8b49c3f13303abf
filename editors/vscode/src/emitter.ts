/** A minimal event emitter (vscode's EventEmitter without `vscode`); a throwing listener does not stop the others. */
import type { Disposable } from './protocol';

type Listener<T> = (e: T) => void;

export class Emitter<T> {
  private listeners = new Set<Listener<T>>();
  event = (listener: Listener<T>): Disposable => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) {
      try {
        l(e);
      } catch (err) {
        console.error('ctxd: listener failed', err);
      }
    }
  }
  dispose(): void {
    this.listeners.clear();
  }
}
