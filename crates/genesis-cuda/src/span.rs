//! Typed views of device memory: [`DeviceSpan`] (read) and [`DeviceSpanMut`] (write).
//!
//! A span is a device address, a length in elements and an element type `T`, borrowed from
//! whatever owns the memory (a [`DeviceBuffer`](crate::DeviceBuffer), a pool allocation held by
//! a storage) for the lifetime `'a`. Sub-spans are taken with checked ranges, so address
//! arithmetic is written once, here. Kernel launchers take spans and check every extent they
//! touch against them; the one promise left to the caller is made when a span is created from a
//! raw address ([`DeviceSpan::from_raw`]).
//!
//! Spans make no driver call and exist without the `cuda` feature.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use crate::{Error, Result};

/// `len` elements of `T` of device memory at `addr`, readable for `'a`.
pub struct DeviceSpan<'a, T> {
    addr: u64,
    len: usize,
    _memory: PhantomData<&'a [T]>,
}

/// `len` elements of `T` of device memory at `addr`, exclusively writable for `'a`.
pub struct DeviceSpanMut<'a, T> {
    addr: u64,
    len: usize,
    _memory: PhantomData<&'a mut [T]>,
}

impl<T> Clone for DeviceSpan<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DeviceSpan<'_, T> {}

impl<T> std::fmt::Debug for DeviceSpan<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceSpan<{}>({:#x}, {})",
            std::any::type_name::<T>(),
            self.addr,
            self.len
        )
    }
}

impl<T> std::fmt::Debug for DeviceSpanMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceSpanMut<{}>({:#x}, {})",
            std::any::type_name::<T>(),
            self.addr,
            self.len
        )
    }
}

/// `range` resolved against a length of `len`, or an error naming `op`.
fn resolve(op: &'static str, range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(Error::InvalidArgument {
            op,
            reason: format!(
                "range {:?}..{:?} outside a span of {len} elements",
                range.start_bound(),
                range.end_bound()
            ),
        }),
    }
}

fn offset_addr<T>(addr: u64, start: usize) -> u64 {
    // Cannot overflow: `start` lies within a span of live memory.
    addr + (start * size_of::<T>()) as u64
}

/// Reinterprets `len` elements of `T` at `addr` as elements of `U`: the byte length must be a
/// whole number of `U`s and the address aligned for `U`.
fn recast<T, U>(op: &'static str, addr: u64, len: usize) -> Result<usize> {
    let bytes = len * size_of::<T>();
    let size = size_of::<U>().max(1);
    if !bytes.is_multiple_of(size) || !addr.is_multiple_of(align_of::<U>() as u64) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "{bytes} bytes at {addr:#x} are not a whole, aligned run of {}",
                std::any::type_name::<U>()
            ),
        });
    }
    Ok(bytes / size)
}

impl<'a, T> DeviceSpan<'a, T> {
    /// A span of `len` elements of `T` at device address `addr`.
    ///
    /// # Safety
    ///
    /// `addr` must be device memory (of the context the span's work will run in, or reachable
    /// from it through unified addressing) holding `len` initialised elements of `T`, aligned
    /// for `T`, that stays allocated and is not written by anything else for `'a` and until
    /// every kernel launched on the span has completed (memory released in stream order, as a
    /// pool allocation is, satisfies the second part).
    pub unsafe fn from_raw(addr: u64, len: usize) -> DeviceSpan<'a, T> {
        debug_assert!(len == 0 || addr.is_multiple_of(align_of::<T>() as u64));
        DeviceSpan {
            addr,
            len,
            _memory: PhantomData,
        }
    }

    /// The device address of the first element.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The elements of `range`; an error when the range is not within the span.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSpan<'a, T>> {
        let (start, len) = resolve("DeviceSpan::slice", range, self.len)?;
        Ok(DeviceSpan {
            addr: offset_addr::<T>(self.addr, start),
            len,
            _memory: PhantomData,
        })
    }

    /// The same bytes as elements of `U` (the byte length a whole number of `U`s, the address
    /// aligned for `U`).
    pub fn cast<U>(self) -> Result<DeviceSpan<'a, U>> {
        let len = recast::<T, U>("DeviceSpan::cast", self.addr, self.len)?;
        Ok(DeviceSpan {
            addr: self.addr,
            len,
            _memory: PhantomData,
        })
    }

    /// Whether the address is a multiple of `align` bytes.
    pub fn is_aligned_to(&self, align: u64) -> bool {
        self.addr.is_multiple_of(align)
    }
}

impl<'a, T> DeviceSpanMut<'a, T> {
    /// A writable span of `len` elements of `T` at device address `addr`.
    ///
    /// # Safety
    ///
    /// As for [`DeviceSpan::from_raw`], except that the elements need not be initialised, and
    /// nothing else may read or write them for `'a` and until every kernel launched on the span
    /// has completed.
    pub unsafe fn from_raw(addr: u64, len: usize) -> DeviceSpanMut<'a, T> {
        debug_assert!(len == 0 || addr.is_multiple_of(align_of::<T>() as u64));
        DeviceSpanMut {
            addr,
            len,
            _memory: PhantomData,
        }
    }

    /// The device address of the first element.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// Whether the address is a multiple of `align` bytes.
    pub fn is_aligned_to(&self, align: u64) -> bool {
        self.addr.is_multiple_of(align)
    }

    /// A read-only view of the same elements, for as long as this borrow.
    pub fn as_span(&self) -> DeviceSpan<'_, T> {
        DeviceSpan {
            addr: self.addr,
            len: self.len,
            _memory: PhantomData,
        }
    }

    /// A shorter-lived writable span of the same elements.
    pub fn reborrow(&mut self) -> DeviceSpanMut<'_, T> {
        DeviceSpanMut {
            addr: self.addr,
            len: self.len,
            _memory: PhantomData,
        }
    }

    /// The elements of `range`, writable; an error when the range is not within the span.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSpanMut<'_, T>> {
        let (start, len) = resolve("DeviceSpanMut::slice_mut", range, self.len)?;
        Ok(DeviceSpanMut {
            addr: offset_addr::<T>(self.addr, start),
            len,
            _memory: PhantomData,
        })
    }

    /// The span narrowed to `range`, keeping its lifetime.
    pub fn into_slice(self, range: impl RangeBounds<usize>) -> Result<DeviceSpanMut<'a, T>> {
        let (start, len) = resolve("DeviceSpanMut::into_slice", range, self.len)?;
        Ok(DeviceSpanMut {
            addr: offset_addr::<T>(self.addr, start),
            len,
            _memory: PhantomData,
        })
    }

    /// Two disjoint writable spans: elements `..mid` and `mid..`.
    pub fn split_at_mut(self, mid: usize) -> Result<(DeviceSpanMut<'a, T>, DeviceSpanMut<'a, T>)> {
        let (_, left) = resolve("DeviceSpanMut::split_at_mut", ..mid, self.len)?;
        let right = DeviceSpanMut {
            addr: offset_addr::<T>(self.addr, mid),
            len: self.len - left,
            _memory: PhantomData,
        };
        Ok((
            DeviceSpanMut {
                addr: self.addr,
                len: left,
                _memory: PhantomData,
            },
            right,
        ))
    }

    /// The same bytes as elements of `U` (the byte length a whole number of `U`s, the address
    /// aligned for `U`).
    pub fn cast<U>(self) -> Result<DeviceSpanMut<'a, U>> {
        let len = recast::<T, U>("DeviceSpanMut::cast", self.addr, self.len)?;
        Ok(DeviceSpanMut {
            addr: self.addr,
            len,
            _memory: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_is_checked_and_offsets_in_elements() {
        // SAFETY: no kernel is launched on these spans; they are only sliced.
        let s = unsafe { DeviceSpan::<f32>::from_raw(0x1000, 10) };
        let t = s.slice(2..5).unwrap();
        assert_eq!((t.addr(), t.len()), (0x1008, 3));
        assert_eq!(s.slice(..).unwrap().len(), 10);
        assert_eq!(s.slice(10..).unwrap().len(), 0);
        assert!(s.slice(4..11).is_err());
        let (from, to) = (6, 5);
        assert!(s.slice(from..to).is_err());
        assert!(s.slice(..=usize::MAX).is_err());
        assert_eq!(t.byte_len(), 12);
    }

    #[test]
    fn mutable_spans_split_and_cast() {
        // SAFETY: as above.
        let m = unsafe { DeviceSpanMut::<u16>::from_raw(0x2000, 8) };
        let (a, b) = m.split_at_mut(3).unwrap();
        assert_eq!(
            (a.addr(), a.len(), b.addr(), b.len()),
            (0x2000, 3, 0x2006, 5)
        );
        assert!(a.cast::<u32>().is_err());
        // SAFETY: as above.
        let m = unsafe { DeviceSpanMut::<u16>::from_raw(0x2000, 8) };
        let w = m.cast::<u64>().unwrap();
        assert_eq!(w.len(), 2);
        assert!(w.into_slice(1..3).is_err());
        // SAFETY: as above.
        let mut m = unsafe { DeviceSpanMut::<u8>::from_raw(0x2001, 4) };
        assert!(m.reborrow().cast::<u16>().is_err());
        assert_eq!(m.slice_mut(1..).unwrap().addr(), 0x2002);
        assert_eq!(m.as_span().len(), 4);
        assert!(DeviceSpanMut::split_at_mut(m, 5).is_err());
    }
}
