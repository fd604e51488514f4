//! A slab with generation-checked handles.
//!
//! Events name the GET or read they concern by a [`Handle`]. A slot is reused once its
//! occupant is gone, so every handle carries the slot's generation: an event for a GET
//! that already ended (a timeout after the answer, an answer after a cancel) finds a newer
//! generation and is ignored instead of hitting the wrong GET.

/// A generation-checked index into a [`Slab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Handle {
    /// Slot index.
    pub index: u32,
    /// Generation of the occupant this handle was issued for.
    pub gen: u32,
}

/// Storage with reusable slots and stale-handle detection.
#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value`, returning its handle.
    pub fn insert(&mut self, value: T) -> Handle {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(value);
            Handle { index, gen: slot.0 }
        } else {
            let index = self.slots.len() as u32;
            self.slots.push((0, Some(value)));
            Handle { index, gen: 0 }
        }
    }

    /// The occupant `h` was issued for, if it is still there.
    pub fn get(&self, h: Handle) -> Option<&T> {
        match self.slots.get(h.index as usize) {
            Some((g, Some(v))) if *g == h.gen => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the occupant `h` was issued for.
    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        match self.slots.get_mut(h.index as usize) {
            Some((g, Some(v))) if *g == h.gen => Some(v),
            _ => None,
        }
    }

    /// Removes and returns the occupant `h` was issued for.
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        match self.slots.get_mut(h.index as usize) {
            Some((g, slot @ Some(_))) if *g == h.gen => {
                self.len -= 1;
                self.free.push(h.index);
                slot.take()
            }
            _ => None,
        }
    }

    /// Occupied slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no slot is occupied.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_handles_miss_the_new_occupant() {
        let mut s = Slab::default();
        let a = s.insert("a");
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.index, b.index);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 1);
    }
}
