//! The fuzz input as a stream of little-endian fields, shared by the
//! targets that decode records from it (`#[path]`-included: each target
//! is its own crate root). Every read is `None` once the input runs out.

/// The bytes not read yet.
pub struct Input<'a>(pub &'a [u8]);

#[allow(dead_code)] // not every target reads every width
impl<'a> Input<'a> {
    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    /// Four bytes, little-endian.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }
    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from(self.u32()?) | u64::from(self.u32()?) << 32)
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
}
