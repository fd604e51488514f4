//! The readiness loops: N worker threads, each with one `mio::Poll`, owning the
//! connections, exchanges and reads that run on it, with a timer heap for core's
//! deadlines and a task queue through which other threads (and other workers) hand it
//! work.
//!
//! One turn of a worker's loop:
//!
//! 1. `poll` with the earliest live deadline of its timer heap as the timeout (zero while
//!    connections carried over from the last turn still have work: bounded work per
//!    wake-up, so one busy connection cannot starve the rest);
//! 2. run the tasks other threads queued for it (starting a GET, a read, a server's phase
//!    change, the answer to a relayed fetch);
//! 3. for every readiness event, record the socket's readiness and drive its entry;
//! 4. fire every due timer (`handle_timeout(now)` with the *current* time, never the
//!    deadline), then drive the entries carried over.
//!
//! Every entry is driven the same way: feed what happened, drain the machine's outputs
//! until it has nothing more to say, re-arm its timer at `poll_timeout()`.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};
use peerblock_core::time::{Clock, Instant};

/// The waker's token: never a slab index.
const WAKER: Token = Token(usize::MAX);

/// Readiness events taken per `poll` call.
const EVENTS_PER_POLL: usize = 1024;

/// Most tasks run per turn, so a flood of queued work cannot starve the sockets; the rest
/// waits for the next turn (which then polls with a zero timeout).
const TASKS_PER_TURN: usize = 1024;

/// Work queued for a worker: a closure run on the worker's thread with the worker.
pub(crate) type Task = Box<dyn FnOnce(&mut Worker) + Send>;

/// A handle on one worker: queue a task and wake its poll.
#[derive(Clone)]
pub(crate) struct Remote {
    queue: Arc<Mutex<VecDeque<Task>>>,
    waker: Arc<Waker>,
}

impl Remote {
    /// Runs `task` on the worker's thread, soon.
    pub(crate) fn run(&self, task: impl FnOnce(&mut Worker) + Send + 'static) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Box::new(task));
        if let Err(e) = self.waker.wake() {
            tracing::error!(error = %e, "waking a worker failed");
        }
    }
}

/// The driver's threads: `N` workers, each with its own poll loop. Clients, servers,
/// readers and roster services started on a runtime share its workers. Dropping the last
/// handle stops the threads (after the servers on it have been shut down or dropped).
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    remotes: Vec<Remote>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for r in &self.remotes {
            let _ = r.waker.wake();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.inner.remotes.len())
            .finish()
    }
}

/// Default number of worker threads: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Runtime {
    /// Starts `threads` workers (at least one) on the node's `clock`.
    pub fn new(threads: usize, clock: Clock) -> io::Result<Runtime> {
        let threads = threads.max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut polls = Vec::with_capacity(threads);
        let mut remotes = Vec::with_capacity(threads);
        for _ in 0..threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            remotes.push(Remote {
                queue: Arc::new(Mutex::new(VecDeque::new())),
                waker,
            });
            polls.push(poll);
        }
        let mut handles = Vec::with_capacity(threads);
        for (id, poll) in polls.into_iter().enumerate() {
            let mut worker = Worker {
                id,
                poll,
                entries: Entries::default(),
                timers: BinaryHeap::new(),
                carried: VecDeque::new(),
                local: VecDeque::new(),
                queue: Arc::clone(&remotes[id].queue),
                remotes: remotes.clone(),
                clock,
                clients: Locals::default(),
            };
            let stop = Arc::clone(&stop);
            let handle = std::thread::Builder::new()
                .name(format!("peerblock-mio-{id}"))
                .spawn(move || worker.run(&stop))?;
            handles.push(handle);
        }
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                remotes,
                clock,
                stop,
                threads: Mutex::new(handles),
            }),
        })
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.inner.remotes.len()
    }

    /// The node's clock.
    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Core's `now` on the node's clock.
    pub fn now(&self) -> Instant {
        self.inner.clock.to_core(std::time::Instant::now())
    }

    pub(crate) fn remote(&self, worker: usize) -> &Remote {
        &self.inner.remotes[worker % self.inner.remotes.len()]
    }

    /// The worker that owns every exchange with the peer at `addr`: a peer's pool, its
    /// connection slots and their waiters all live on one worker, so they need no lock.
    pub(crate) fn worker_for(&self, addr: &str) -> usize {
        let h = blake3::hash(addr.as_bytes());
        let n = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
        (n % self.inner.remotes.len() as u64) as usize
    }
}

/// An entry's identity: its slab index and a generation, so an answer for an entry that
/// has ended (and whose index was reused) is recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) index: usize,
    pub(crate) gen: u64,
}

/// What a worker drives: a server's listener, a server connection, a client exchange, a
/// GET waiting for a connection slot, a read, a roster refresh. Each module implements it
/// for its own type; the worker knows none of them (it is the lowest module).
pub(crate) trait Driven: AsAny + Send {
    /// Drives it with what its socket reported (`Ready::default()`: a wake-up without an
    /// event).
    fn on_ready(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After;
    /// Its timer fired.
    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After;
}

/// The downcasts of an [`Entry`] (a blanket impl: no type writes it).
pub(crate) trait AsAny: Any {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Any> AsAny for T {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Everything a worker drives, one per slab cell.
pub(crate) struct Entry(Box<dyn Driven>);

impl Entry {
    pub(crate) fn new<T: Driven>(item: Box<T>) -> Entry {
        Entry(item)
    }

    /// The entry as a `T`, if it is one (a task finds the kind of entry it expects).
    pub(crate) fn get<T: Driven>(&mut self) -> Option<&mut T> {
        self.0.as_mut().as_any_mut().downcast_mut::<T>()
    }

    /// The entry as a `T`, if it is one.
    pub(crate) fn into_inner<T: Driven>(self) -> Option<Box<T>> {
        self.0.into_any().downcast::<T>().ok()
    }
}

/// Per-client state a worker keeps for the client module, by client id (the worker does
/// not know its type).
#[derive(Default)]
pub(crate) struct Locals(std::collections::HashMap<u64, Box<dyn Any + Send>>);

impl Locals {
    pub(crate) fn get<T: Any>(&self, id: u64) -> Option<&T> {
        self.0.get(&id).and_then(|l| l.downcast_ref::<T>())
    }

    pub(crate) fn get_mut<T: Any>(&mut self, id: u64) -> Option<&mut T> {
        self.0.get_mut(&id).and_then(|l| l.downcast_mut::<T>())
    }

    /// The client's state, created empty on first use.
    pub(crate) fn or_default<T: Any + Send + Default>(&mut self, id: u64) -> &mut T {
        self.0
            .entry(id)
            .or_insert_with(|| Box::new(T::default()))
            .downcast_mut::<T>()
            .expect("one type of client state: the client module's")
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.0.remove(&id);
    }
}

struct Cell {
    gen: u64,
    entry: Option<Entry>,
    /// The deadline the entry's timer is armed at (one heap item is live for it).
    armed: Option<Instant>,
}

/// A slab of entries with generations.
#[derive(Default)]
struct Entries {
    cells: Vec<Option<Cell>>,
    free: Vec<usize>,
    next_gen: u64,
    live: usize,
}

impl Entries {
    fn insert(&mut self, entry: Entry) -> Key {
        self.next_gen += 1;
        let gen = self.next_gen;
        let cell = Cell {
            gen,
            entry: Some(entry),
            armed: None,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.cells[i] = Some(cell);
                i
            }
            None => {
                self.cells.push(Some(cell));
                self.cells.len() - 1
            }
        };
        self.live += 1;
        Key { index, gen }
    }

    /// Takes the entry out to drive it (its cell stays reserved).
    fn take(&mut self, key: Key) -> Option<Entry> {
        match self.cells.get_mut(key.index) {
            Some(Some(cell)) if cell.gen == key.gen => cell.entry.take(),
            _ => None,
        }
    }

    fn take_index(&mut self, index: usize) -> Option<(Key, Entry)> {
        let cell = self.cells.get_mut(index)?.as_mut()?;
        let entry = cell.entry.take()?;
        Some((
            Key {
                index,
                gen: cell.gen,
            },
            entry,
        ))
    }

    fn put_back(&mut self, key: Key, entry: Entry) {
        if let Some(Some(cell)) = self.cells.get_mut(key.index) {
            if cell.gen == key.gen {
                cell.entry = Some(entry);
            }
        }
    }

    fn remove(&mut self, key: Key) {
        if let Some(slot) = self.cells.get_mut(key.index) {
            if slot.as_ref().is_some_and(|c| c.gen == key.gen) {
                *slot = None;
                self.free.push(key.index);
                self.live -= 1;
            }
        }
    }

    /// Records `deadline` as the entry's armed deadline: `true` if it changed (a new
    /// heap item is needed).
    fn rearm(&mut self, key: Key, deadline: Option<Instant>) -> bool {
        match self.cells.get_mut(key.index) {
            Some(Some(cell)) if cell.gen == key.gen && cell.armed != deadline => {
                cell.armed = deadline;
                true
            }
            _ => false,
        }
    }

    /// Whether `at` is the entry's armed deadline (a heap item that is not is stale).
    fn is_armed(&self, key: Key, at: Instant) -> bool {
        matches!(self.cells.get(key.index), Some(Some(cell)) if cell.gen == key.gen && cell.armed == Some(at))
    }

    fn disarm(&mut self, key: Key) {
        if let Some(Some(cell)) = self.cells.get_mut(key.index) {
            if cell.gen == key.gen {
                cell.armed = None;
            }
        }
    }

    fn keys(&self) -> Vec<Key> {
        self.cells
            .iter()
            .enumerate()
            .filter_map(|(index, c)| c.as_ref().map(|c| Key { index, gen: c.gen }))
            .collect()
    }
}

/// What became of an entry after it was driven.
pub(crate) enum After {
    /// Keep it; re-arm its timer at this deadline (`None`: no timer).
    Keep(Option<Instant>),
    /// Keep it and drive it again next turn (its work budget ran out while it still had
    /// work).
    Again(Option<Instant>),
    /// It ended: drop it (its `Drop` has released what it held).
    Done,
    /// It was not driven (a task found another kind of entry under the key): put it back
    /// with its timer as it was.
    Unchanged,
}

/// What happened to an entry's socket.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ready {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) closed: bool,
}

/// One worker thread's state.
pub(crate) struct Worker {
    pub(crate) id: usize,
    pub(crate) poll: Poll,
    entries: Entries,
    /// Deadlines: (when, entry). An entry re-armed at another deadline leaves a stale
    /// heap item behind, recognised on pop (the entry's armed deadline differs).
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// Entries whose work budget ran out: driven again next turn.
    carried: VecDeque<Key>,
    /// Tasks this worker queued for itself (no lock, no wake).
    local: VecDeque<Task>,
    queue: Arc<Mutex<VecDeque<Task>>>,
    pub(crate) remotes: Vec<Remote>,
    pub(crate) clock: Clock,
    /// Per-client state kept on this worker (pools, connection slots, waiters, requests
    /// in flight), indexed by the client's id.
    pub(crate) clients: Locals,
}

impl Worker {
    /// Core's `now`.
    pub(crate) fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }

    /// Queues `task` on worker `worker` (this one: no lock, no wake).
    pub(crate) fn post(&mut self, worker: usize, task: impl FnOnce(&mut Worker) + Send + 'static) {
        if worker == self.id {
            self.local.push_back(Box::new(task));
        } else {
            self.remotes[worker % self.remotes.len()].run(task);
        }
    }

    /// A handle to post back to this worker from another thread.
    pub(crate) fn me(&self) -> Remote {
        self.remotes[self.id].clone()
    }

    /// Adds an entry, registering nothing (the caller registers its socket with the key's
    /// token), and drives it once.
    pub(crate) fn insert(&mut self, entry: Entry) -> Key {
        self.entries.insert(entry)
    }

    /// Inserts `entry`, lets `register` register its socket under the entry's key, and
    /// drives it once. A failed registration drops the entry (its `Drop` releases what it
    /// holds) and returns `None`.
    pub(crate) fn spawn(
        &mut self,
        entry: Entry,
        register: impl FnOnce(&mut Worker, Key, &mut Entry) -> io::Result<()>,
    ) -> Option<Key> {
        match self.place(entry, register) {
            Ok(key) => {
                self.drive(key, Ready::default());
                Some(key)
            }
            Err((e, entry)) => {
                tracing::warn!(error = %e, "registering a socket failed");
                drop(entry);
                None
            }
        }
    }

    /// Inserts `entry` and lets `register` register its socket under the entry's key,
    /// without driving it: the caller records the key, then drives it. A failed
    /// registration gives the entry back, so the caller can settle what it holds.
    pub(crate) fn place(
        &mut self,
        entry: Entry,
        register: impl FnOnce(&mut Worker, Key, &mut Entry) -> io::Result<()>,
    ) -> Result<Key, (io::Error, Entry)> {
        let key = self.entries.insert(placeholder());
        let mut entry = entry;
        if let Err(e) = register(self, key, &mut entry) {
            self.entries.remove(key);
            return Err((e, entry));
        }
        self.entries.put_back(key, entry);
        Ok(key)
    }

    /// Runs `f` on the entry `key` if it is still there, then acts on its `After`.
    pub(crate) fn with_entry(
        &mut self,
        key: Key,
        f: impl FnOnce(&mut Worker, Key, &mut Entry) -> After,
    ) {
        let Some(mut entry) = self.entries.take(key) else {
            return;
        };
        let after = f(self, key, &mut entry);
        self.settle(key, entry, after);
    }

    fn settle(&mut self, key: Key, entry: Entry, after: After) {
        match after {
            After::Unchanged => self.entries.put_back(key, entry),
            After::Done => {
                self.entries.remove(key);
                drop(entry);
            }
            After::Keep(deadline) | After::Again(deadline) => {
                let again = matches!(after, After::Again(_));
                self.entries.put_back(key, entry);
                self.arm(key, deadline);
                if again {
                    self.carried.push_back(key);
                }
            }
        }
    }

    /// Drives entry `key` with what its socket reported.
    pub(crate) fn drive(&mut self, key: Key, ready: Ready) {
        self.with_entry(key, |w, key, entry| entry.0.on_ready(w, key, ready));
    }

    /// Every live entry's key (for a server's phase change).
    pub(crate) fn keys(&self) -> Vec<Key> {
        self.entries.keys()
    }

    fn arm(&mut self, key: Key, deadline: Option<Instant>) {
        if !self.entries.rearm(key, deadline) {
            return;
        }
        if let Some(at) = deadline {
            // Compaction: stale items are dropped when popped; bound the heap anyway.
            if self.timers.len() > 4 * self.entries.live + 1024 {
                self.compact_timers();
            }
            self.timers.push(Reverse((at, key.index, key.gen)));
        }
    }

    fn compact_timers(&mut self) {
        let items: Vec<_> = std::mem::take(&mut self.timers).into_vec();
        let live: Vec<_> = items
            .into_iter()
            .filter(|Reverse((at, index, gen))| {
                self.entries.is_armed(
                    Key {
                        index: *index,
                        gen: *gen,
                    },
                    *at,
                )
            })
            .collect();
        self.timers = live.into();
    }

    /// The earliest deadline in the heap (possibly stale: a stale one only wakes the loop
    /// early, and a spurious `handle_timeout` is harmless).
    fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        while !stop.load(Ordering::SeqCst) {
            let timeout = if !self.carried.is_empty() || !self.local.is_empty() {
                Some(Duration::ZERO)
            } else {
                self.next_deadline().map(|at| {
                    let now = self.now();
                    at.saturating_duration_since(now) + Duration::from_micros(50)
                })
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(worker = self.id, error = %e, "poll failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            self.run_tasks();
            for event in events.iter() {
                if event.token() == WAKER {
                    continue;
                }
                let ready = Ready {
                    readable: event.is_readable() || event.is_read_closed() || event.is_error(),
                    writable: event.is_writable() || event.is_write_closed() || event.is_error(),
                    closed: event.is_read_closed() || event.is_error(),
                };
                if let Some((key, entry)) = self.entries.take_index(event.token().0) {
                    self.entries.put_back(key, entry);
                    self.drive(key, ready);
                }
            }
            self.run_tasks();
            self.fire_timers();
            let carried = self.carried.len();
            for _ in 0..carried {
                let Some(key) = self.carried.pop_front() else {
                    break;
                };
                self.drive(key, Ready::default());
            }
        }
        tracing::debug!(worker = self.id, "worker stopped");
    }

    fn run_tasks(&mut self) {
        let mut n = 0;
        loop {
            while let Some(task) = self.local.pop_front() {
                task(self);
                n += 1;
                if n >= TASKS_PER_TURN {
                    // Whatever is still queued (here or by other threads) runs next turn,
                    // which polls with a zero timeout.
                    let _ = self.remotes[self.id].waker.wake();
                    return;
                }
            }
            let batch: Vec<Task> = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let take = q.len().min(TASKS_PER_TURN - n);
                q.drain(..take).collect()
            };
            if batch.is_empty() {
                return;
            }
            for task in batch {
                task(self);
                n += 1;
            }
            if n >= TASKS_PER_TURN {
                // More queued: the next turn polls with a zero timeout.
                let _ = self.remotes[self.id].waker.wake();
                return;
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now();
        while let Some(Reverse((at, index, gen))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let key = Key { index, gen };
            if !self.entries.is_armed(key, at) {
                continue;
            }
            self.entries.disarm(key);
            self.with_entry(key, |w, key, entry| entry.0.on_timer(w, key));
        }
    }
}

/// A cell's content while its real entry is being registered: driven, it ends.
struct Placeholder;

impl Driven for Placeholder {
    fn on_ready(&mut self, _w: &mut Worker, _key: Key, _ready: Ready) -> After {
        After::Done
    }
    fn on_timer(&mut self, _w: &mut Worker, _key: Key) -> After {
        After::Done
    }
}

fn placeholder() -> Entry {
    Entry::new(Box::new(Placeholder))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        placeholder()
    }

    #[test]
    fn a_reused_slot_gets_a_new_generation_and_the_old_key_finds_nothing() {
        let mut e = Entries::default();
        let a = e.insert(entry());
        e.remove(a);
        let b = e.insert(entry());
        assert_eq!(a.index, b.index, "the slot is reused");
        assert_ne!(a.gen, b.gen);
        assert!(
            e.take(a).is_none(),
            "an answer for the ended entry is dropped"
        );
        assert!(e.take(b).is_some());
    }

    #[test]
    fn removing_with_a_stale_key_leaves_the_new_entry() {
        let mut e = Entries::default();
        let a = e.insert(entry());
        e.remove(a);
        let b = e.insert(entry());
        e.remove(a);
        assert_eq!(e.live, 1);
        assert_eq!(e.keys(), vec![b]);
    }

    #[test]
    fn rearming_at_the_same_deadline_needs_no_new_timer_and_a_moved_one_does() {
        let mut e = Entries::default();
        let k = e.insert(entry());
        let t = Instant::from_secs(5);
        assert!(e.rearm(k, Some(t)), "first arming");
        assert!(!e.rearm(k, Some(t)), "same deadline: no heap item");
        assert!(e.is_armed(k, t));
        let later = Instant::from_secs(6);
        assert!(e.rearm(k, Some(later)), "moved");
        assert!(!e.is_armed(k, t), "the earlier heap item is now stale");
        assert!(e.is_armed(k, later));
        assert!(e.rearm(k, None), "disarmed");
        assert!(!e.is_armed(k, later));
    }

    #[test]
    fn a_stale_key_is_never_armed() {
        let mut e = Entries::default();
        let a = e.insert(entry());
        let t = Instant::from_secs(1);
        e.rearm(a, Some(t));
        e.remove(a);
        let b = e.insert(entry());
        assert!(!e.rearm(a, Some(t)), "arming an ended entry does nothing");
        assert!(!e.is_armed(a, t));
        assert!(!e.is_armed(b, t));
    }

    #[test]
    fn a_task_posted_from_another_thread_runs_on_the_worker() {
        let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for worker in 0..2 {
            let tx = tx.clone();
            rt.remote(worker).run(move |w| tx.send(w.id).unwrap());
        }
        let mut ran: Vec<usize> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        ran.sort_unstable();
        assert_eq!(
            ran,
            vec![0, 1],
            "each task ran on the worker it was posted to"
        );
    }

    #[test]
    fn every_peer_address_has_one_worker() {
        let rt = Runtime::new(4, Clock::new(std::time::Instant::now())).unwrap();
        let a = rt.worker_for("127.0.0.1:7070");
        assert_eq!(a, rt.worker_for("127.0.0.1:7070"));
        assert!(a < 4);
        let spread: std::collections::BTreeSet<usize> = (0..64)
            .map(|i| rt.worker_for(&format!("127.0.0.{i}:7070")))
            .collect();
        assert_eq!(spread.len(), 4, "addresses spread over every worker");
    }
}
