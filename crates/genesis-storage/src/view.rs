//! `View`: a layout over a shared storage. Views of views share the same storage, which stays
//! alive (and keeps its memory out of the pool) until the last view is dropped.

use std::sync::Arc;

use crate::{Layout, Result, Storage};

/// A shape, strides and offset over a reference-counted [`Storage`].
#[derive(Debug, Clone)]
pub struct View {
    base: Arc<Storage>,
    layout: Layout,
}

impl View {
    /// The whole storage as a one-dimensional contiguous view.
    pub fn new(storage: Storage) -> View {
        let layout = Layout::contiguous(&[storage.len()]);
        View {
            base: Arc::new(storage),
            layout,
        }
    }

    /// A view of `base` with `layout`, checked against the storage's length.
    pub fn with_layout(base: Arc<Storage>, layout: Layout) -> Result<View> {
        layout.check_bounds(base.len())?;
        Ok(View { base, layout })
    }

    /// The shared storage.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.base
    }

    /// The shared storage, mutably (to check for or take exclusive access with
    /// `Arc::get_mut`).
    pub fn storage_mut(&mut self) -> &mut Arc<Storage> {
        &mut self.base
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether two views share one storage.
    pub fn shares_storage(&self, other: &View) -> bool {
        Arc::ptr_eq(&self.base, &other.base)
    }

    /// The same storage under another layout (from a view operation of [`Layout`]).
    pub fn relayout(&self, layout: Layout) -> Result<View> {
        View::with_layout(Arc::clone(&self.base), layout)
    }

    /// The elements in row-major order, in a new storage on the same device.
    pub fn contiguous(&self) -> Result<Storage> {
        self.base.contiguous(&self.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device, Error};

    #[test]
    fn views_share_and_keep_their_base() {
        let v =
            View::new(Storage::from_slice(&(0..12).collect::<Vec<i32>>(), Device::Cpu).unwrap());
        let m = v.relayout(v.layout().view(&[3, 4]).unwrap()).unwrap();
        let t = m.relayout(m.layout().transpose(0, 1).unwrap()).unwrap();
        assert!(t.shares_storage(&v));
        assert_eq!(Arc::strong_count(v.storage()), 3);
        drop(v);
        drop(m);
        // The transposed view alone keeps the storage alive.
        assert_eq!(
            t.contiguous().unwrap().to_vec::<i32>().unwrap(),
            vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
        );
        assert_eq!(Arc::strong_count(t.storage()), 1);
        let e = t.relayout(Layout::contiguous(&[13])).unwrap_err();
        assert!(matches!(e, Error::Layout(_)));
        let z = View::new(Storage::zeros(0, DType::F32, Device::Cpu).unwrap());
        assert_eq!(z.contiguous().unwrap().len(), 0);
    }
}
