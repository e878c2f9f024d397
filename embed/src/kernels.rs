//! The numeric kernels of the in-process BERT forward pass ([`super::bert`]): dense layers with
//! pre-packed weights, layer norm, GELU and softmax.
//!
//! Why not a general matrix library: a query is ~25 tokens, and a general GEMM (candle's) packs
//! the whole weight matrix into its panel layout on every call, which for so few rows costs
//! about as much as the multiplication itself. The weights never change, so [`PackedLinear`]
//! packs them once at load.
//!
//! Each hot loop exists twice: compiled for AVX2+FMA (chosen at run time when the CPU has
//! them) and for the baseline target. Both run the same code, so results agree up to the order
//! of float additions, which the tests bound.

use rayon::prelude::*;

/// Output columns per packed panel: two 8-lane AVX registers.
const NR: usize = 16;
/// Rows per micro-kernel call: 6 rows x 2 registers = 12 accumulators, plus 2 panel loads and
/// a broadcast, fit the 16 AVX registers.
const MR: usize = 6;
/// Rows per cache block: a block of input rows (up to 48 x 1536 floats, 288 KiB) stays in L2
/// while every panel of the group passes over it.
const MB: usize = 48;

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    // The std macro caches its answer; this is a load and a test.
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// `y = x Wᵀ + b` for a linear layer whose weight `W` (n x k, row-major as stored in
/// safetensors) was packed once into column panels: panel `p` holds `W[16p..16p+16][q]` for
/// every `q` as 16 consecutive floats, which is the order the micro-kernel reads them.
pub(crate) struct PackedLinear {
    n: usize,
    k: usize,
    panels: Vec<f32>,
    bias: Vec<f32>,
}

impl PackedLinear {
    pub fn new(weight: &[f32], bias: &[f32], n: usize, k: usize) -> Result<Self, String> {
        if weight.len() != n * k || bias.len() != n {
            return Err(format!(
                "linear layer {n}x{k}: weight has {} values, bias {}",
                weight.len(),
                bias.len()
            ));
        }
        if !n.is_multiple_of(NR) || k == 0 {
            return Err(format!(
                "linear layer {n}x{k}: outputs must be a non-zero multiple of {NR}"
            ));
        }
        let mut panels = vec![0f32; n * k];
        for (p, panel) in panels.chunks_exact_mut(k * NR).enumerate() {
            for q in 0..k {
                for jj in 0..NR {
                    panel[q * NR + jj] = weight[(p * NR + jj) * k + q];
                }
            }
        }
        Ok(Self {
            n,
            k,
            panels,
            bias: bias.to_vec(),
        })
    }

    /// Multiplies `m` rows of `x` (m x k, row-major) and returns the m x n result.
    #[cfg(test)]
    pub fn forward(&self, x: &[f32], m: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * self.n];
        let mut blocks = vec![0f32; m * self.n];
        self.forward_into(x, m, &mut out, &mut blocks);
        out
    }

    /// Multiplies `m` rows of `x` (m x k, row-major) into `out` (m x n), with `blocks` (at
    /// least m x n values, whatever they hold) as scratch: the caller keeps both across calls,
    /// so a forward pass allocates nothing large (docs/PERFORMANCE.md, "Batch create").
    ///
    /// The panels are split between the threads (each reads only its share of the weights, and
    /// for a short query reading the weights is most of the cost); each thread fills its own
    /// column block, a contiguous part of `blocks`, which is then copied into place. Every
    /// value of `out` is written.
    pub fn forward_into(&self, x: &[f32], m: usize, out: &mut [f32], blocks: &mut [f32]) {
        assert_eq!(x.len(), m * self.k, "input rows do not match the layer");
        assert_eq!(out.len(), m * self.n, "output rows do not match the layer");
        assert!(
            blocks.len() >= m * self.n,
            "scratch smaller than the output"
        );
        if m == 0 {
            return;
        }
        let panels = self.n / NR;
        let groups = rayon::current_num_threads().clamp(1, panels);
        let per = panels.div_ceil(groups);
        // Group g's block is m x its width, at m * (its first column) in `blocks`.
        let mut parts: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(groups);
        let mut rest = &mut blocks[..m * self.n];
        for g in 0..groups {
            let (p0, p1) = (g * per, ((g + 1) * per).min(panels));
            let width = (p1.saturating_sub(p0)) * NR;
            let (block, tail) = rest.split_at_mut(m * width);
            rest = tail;
            parts.push((p0, p1, block));
        }
        parts.par_iter_mut().for_each(|(p0, p1, block)| {
            if p1 > p0 {
                self.column_block(x, m, *p0, *p1, block);
            }
        });
        for (p0, p1, block) in parts {
            if p1 <= p0 {
                continue;
            }
            let (col, width) = (p0 * NR, (p1 - p0) * NR);
            for (row, src) in out.chunks_exact_mut(self.n).zip(block.chunks_exact(width)) {
                row[col..col + width].copy_from_slice(src);
            }
        }
    }

    /// Columns `16*p0 .. 16*p1` of the result for all `m` rows, into `block` (m x width).
    fn column_block(&self, x: &[f32], m: usize, p0: usize, p1: usize, block: &mut [f32]) {
        let (k, width) = (self.k, (p1 - p0) * NR);
        #[cfg(target_arch = "x86_64")]
        let fast = has_avx2_fma();
        for i0 in (0..m).step_by(MB) {
            let i1 = (i0 + MB).min(m);
            for p in p0..p1 {
                let panel = &self.panels[p * k * NR..(p + 1) * k * NR];
                let bias = &self.bias[p * NR..(p + 1) * NR];
                let col = (p - p0) * NR;
                let mut i = i0;
                while i < i1 {
                    let rows = (i1 - i).min(MR);
                    let xs = &x[i * k..(i + rows) * k];
                    let out = &mut block[i * width + col..];
                    #[cfg(target_arch = "x86_64")]
                    if fast {
                        // SAFETY: `fast` is `has_avx2_fma()`, so the CPU has the features
                        // the kernel is compiled for, its only requirement: it asserts that
                        // the slices cover everything it reads and writes.
                        unsafe { micro_avx2_rows(rows, xs, k, panel, bias, out, width) };
                        i += rows;
                        continue;
                    }
                    micro_portable(rows, xs, k, panel, bias, out, width);
                    i += rows;
                }
            }
        }
    }
}

/// `rows` (1..=6) rows of output for one panel, without SIMD intrinsics.
fn micro_portable(
    rows: usize,
    x: &[f32],
    k: usize,
    panel: &[f32],
    bias: &[f32],
    out: &mut [f32],
    ldo: usize,
) {
    for r in 0..rows {
        let mut acc = [0f32; NR];
        let xr = &x[r * k..(r + 1) * k];
        for (q, &a) in xr.iter().enumerate() {
            let b = &panel[q * NR..(q + 1) * NR];
            for jj in 0..NR {
                acc[jj] += a * b[jj];
            }
        }
        for jj in 0..NR {
            out[r * ldo + jj] = acc[jj] + bias[jj];
        }
    }
}

/// [`micro_avx2`] for `rows` rows (1 to 6).
///
/// # Safety
///
/// The CPU must have AVX2 and FMA (`has_avx2_fma`). Nothing else: the slices are checked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2_rows(
    rows: usize,
    x: &[f32],
    k: usize,
    panel: &[f32],
    bias: &[f32],
    out: &mut [f32],
    ldo: usize,
) {
    // SAFETY: `micro_avx2` needs what this function needs, AVX2 and FMA.
    match rows {
        1 => micro_avx2::<1>(x, k, panel, bias, out, ldo),
        2 => micro_avx2::<2>(x, k, panel, bias, out, ldo),
        3 => micro_avx2::<3>(x, k, panel, bias, out, ldo),
        4 => micro_avx2::<4>(x, k, panel, bias, out, ldo),
        5 => micro_avx2::<5>(x, k, panel, bias, out, ldo),
        _ => micro_avx2::<MR>(x, k, panel, bias, out, ldo),
    }
}

/// The register-blocked kernel: R rows x 16 columns held in 2R accumulators while the panel
/// streams past once. `out` receives row `r` at `r * ldo`.
///
/// # Safety
///
/// The CPU must have AVX2 and FMA. Short slices panic (the bounds are asserted on entry);
/// they are not read or written past their ends.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<const R: usize>(
    x: &[f32],
    k: usize,
    panel: &[f32],
    bias: &[f32],
    out: &mut [f32],
    ldo: usize,
) {
    use std::arch::x86_64::*;
    // The bounds every raw access below stays within.
    assert!(x.len() >= R * k && panel.len() >= k * NR && bias.len() >= NR);
    assert!(out.len() >= (R - 1) * ldo + NR);
    // SAFETY, for every pointer below: with q < k and r < R, `x` is read at r * k + q
    // < R * k; `panel` at q * 16 .. q * 16 + 16 <= k * 16; `bias` at 0..16; `out` written
    // at r * ldo .. r * ldo + 16 <= (R - 1) * ldo + 16: all within the lengths asserted
    // above. `loadu`/`storeu` take unaligned addresses, and the CPU has AVX2 and FMA (this
    // function's contract).
    let (xp, pp) = (x.as_ptr(), panel.as_ptr());
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    for q in 0..k {
        let b0 = _mm256_loadu_ps(pp.add(q * NR));
        let b1 = _mm256_loadu_ps(pp.add(q * NR + 8));
        for r in 0..R {
            let a = _mm256_broadcast_ss(&*xp.add(r * k + q));
            lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
        }
    }
    let c0 = _mm256_loadu_ps(bias.as_ptr());
    let c1 = _mm256_loadu_ps(bias.as_ptr().add(8));
    let op = out.as_mut_ptr();
    for r in 0..R {
        _mm256_storeu_ps(op.add(r * ldo), _mm256_add_ps(lo[r], c0));
        _mm256_storeu_ps(op.add(r * ldo + 8), _mm256_add_ps(hi[r], c1));
    }
}

/// Runs `f` compiled for AVX2+FMA when the CPU has them, else for the baseline target: the
/// element-wise loops below are written to auto-vectorise, and AVX2 doubles their width.
macro_rules! dispatch {
    ($name:ident, $avx:ident, $body:ident, ($($arg:ident: $ty:ty),*)) => {
        /// The body compiled for AVX2 and FMA.
        ///
        /// # Safety
        ///
        /// The CPU must have AVX2 and FMA; the code itself is the safe body's.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx($($arg: $ty),*) {
            $body($($arg),*)
        }

        pub(crate) fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if has_avx2_fma() {
                // SAFETY: `has_avx2_fma()` says the CPU has AVX2 and FMA, the copy's
                // only requirement.
                return unsafe { $avx($($arg),*) };
            }
            $body($($arg),*)
        }
    };
}

/// `e^x` for f32 to about 1 ulp, in a form that vectorises (the standard library's is a scalar
/// call): `x = n ln2 + r` with `|r| <= ln2/2`, a degree-6 polynomial for `e^r`, and `2^n` built
/// in the exponent bits. Inputs below -87 give ~1e-38 instead of smaller values, which is zero
/// for every use here (softmax weights, erf's tail).
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so n * LN2_HI is exact for |n| < 2^10.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without `round`, which
    // the baseline x86-64 target cannot vectorise.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `erf(x)` by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, about f32's own
/// rounding near 1).
#[inline(always)]
fn erf_approx(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_72 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    let y = 1.0 - poly * exp_approx(-a * a);
    if x < 0.0 {
        -y
    } else {
        y
    }
}

/// GELU as BERT defines it (with erf, not the tanh approximation), in place.
#[inline(always)]
fn gelu_body(v: &mut [f32]) {
    for x in v.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf_approx(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}
dispatch!(gelu, gelu_avx2, gelu_body, (v: &mut [f32]));

/// Softmax of one row, in place.
#[inline(always)]
fn softmax_body(v: &mut [f32]) {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for x in v.iter_mut() {
        *x = exp_approx(*x - max);
        sum += *x;
    }
    let inv = 1.0 / sum;
    for x in v.iter_mut() {
        *x *= inv;
    }
}

/// `x = LayerNorm(x + residual)` row by row (rows of `gamma.len()` values), BERT's
/// post-residual normalisation; `residual` may be empty (the embedding layer has none).
#[inline(always)]
fn add_layer_norm_body(x: &mut [f32], residual: &[f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let d = gamma.len();
    for (i, row) in x.chunks_exact_mut(d).enumerate() {
        if !residual.is_empty() {
            for (a, b) in row.iter_mut().zip(&residual[i * d..(i + 1) * d]) {
                *a += b;
            }
        }
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((a, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *a = (*a - mean) * inv * g + b;
        }
    }
}
dispatch!(
    add_layer_norm,
    add_layer_norm_avx2,
    add_layer_norm_body,
    (x: &mut [f32], residual: &[f32], gamma: &[f32], beta: &[f32], eps: f32)
);

/// Where one attention head of one sequence finds its inputs in the stacked `[q | k | v]`
/// rows: row `i`'s query, key and value are `size` values at `q + i * stride`,
/// `k + i * stride` and `v + i * stride`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    pub stride: usize,
    pub q: usize,
    pub k: usize,
    pub v: usize,
    pub len: usize,
    pub size: usize,
}

/// One attention head over one sequence: writes `len x size` context values to `out`.
#[inline(always)]
fn attend_body(qkv: &[f32], h: Head, out: &mut [f32]) {
    let scale = 1.0 / (h.size as f32).sqrt();
    let row = |base: usize, i: usize| &qkv[base + i * h.stride..base + i * h.stride + h.size];
    let mut weights = vec![0f32; h.len];
    for i in 0..h.len {
        let q = row(h.q, i);
        for (j, w) in weights.iter_mut().enumerate() {
            *w = q.iter().zip(row(h.k, j)).map(|(a, b)| a * b).sum::<f32>() * scale;
        }
        softmax_body(&mut weights);
        let o = &mut out[i * h.size..(i + 1) * h.size];
        o.fill(0.0);
        for (j, &w) in weights.iter().enumerate() {
            for (a, b) in o.iter_mut().zip(row(h.v, j)) {
                *a += w * b;
            }
        }
    }
}
dispatch!(attend, attend_avx2, attend_body, (qkv: &[f32], h: Head, out: &mut [f32]));

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn packed_linear_equals_the_naive_product_for_every_row_count() {
        let (n, k) = (48, 37);
        let w = values(n * k, 1);
        let b = values(n, 2);
        let lin = PackedLinear::new(&w, &b, n, k).unwrap();
        // Row counts around the 6-row kernel and the 48-row block.
        for m in [0, 1, 2, 5, 6, 7, 13, 48, 49, 100] {
            let x = values(m * k, 3 + m as u64);
            let y = lin.forward(&x, m);
            assert_eq!(y.len(), m * n);
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|q| x[i * k + q] * w[j * k + q]).sum::<f32>() + b[j];
                    let got = y[i * n + j];
                    assert!(
                        (got - want).abs() < 1e-4,
                        "m={m} ({i},{j}): {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn reused_buffers_give_the_same_bits_as_fresh_ones() {
        let (n, k) = (64, 24);
        let lin = PackedLinear::new(&values(n * k, 11), &values(n, 12), n, k).unwrap();
        // Buffers left longer and full of another call's values.
        let mut out = vec![f32::NAN; 13 * n];
        let mut blocks = vec![f32::NAN; 20 * n];
        for m in [13, 7, 1, 0] {
            let x = values(m * k, 13 + m as u64);
            out.truncate(m * n);
            lin.forward_into(&x, m, &mut out, &mut blocks);
            let fresh = lin.forward(&x, m);
            assert_eq!(
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                fresh.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "m={m}"
            );
        }
    }

    #[test]
    fn the_portable_kernel_equals_the_dispatched_one() {
        let (n, k, m) = (32, 20, 9);
        let w = values(n * k, 5);
        let b = values(n, 6);
        let x = values(m * k, 7);
        let lin = PackedLinear::new(&w, &b, n, k).unwrap();
        let fast = lin.forward(&x, m);
        let mut slow = vec![0f32; m * n];
        for p in 0..n / NR {
            let panel = &lin.panels[p * k * NR..(p + 1) * k * NR];
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                micro_portable(
                    rows,
                    &x[i * k..(i + rows) * k],
                    k,
                    panel,
                    &b[p * NR..(p + 1) * NR],
                    &mut slow[i * n + p * NR..],
                    n,
                );
                i += rows;
            }
        }
        for (a, b) in fast.iter().zip(&slow) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(PackedLinear::new(&[0.0; 10], &[0.0; 16], 16, 1).is_err());
        assert!(PackedLinear::new(&[0.0; 15], &[0.0; 15], 15, 1).is_err());
    }

    #[test]
    fn exp_erf_and_gelu_are_accurate() {
        for i in -2000..=2000 {
            let x = i as f32 / 100.0;
            let e = exp_approx(x) as f64;
            let want = (x as f64).exp();
            assert!(((e - want) / want).abs() < 5e-7, "exp({x}) = {e} vs {want}");
        }
        // erf against a series that converges for |x| <= 3 (f64 throughout).
        let erf64 = |x: f64| {
            let (mut term, mut sum) = (x, x);
            for n in 1..200 {
                term *= -x * x / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        // The formula's 1.5e-7 plus f32 rounding in its evaluation.
        for i in -300..=300 {
            let x = i as f32 / 100.0;
            let got = erf_approx(x) as f64;
            assert!((got - erf64(x as f64)).abs() < 5e-7, "erf({x}) = {got}");
        }
        let mut v = vec![-3.0f32, -1.0, 0.0, 0.5, 2.0];
        let want: Vec<f64> = v
            .iter()
            .map(|&x| 0.5 * x as f64 * (1.0 + erf64(x as f64 / 2f64.sqrt())))
            .collect();
        gelu(&mut v);
        for (g, w) in v.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn softmax_and_layer_norm_match_their_definitions() {
        let mut v = vec![1.0f32, 2.0, 3.0, -50.0];
        softmax_body(&mut v);
        let e: Vec<f64> = [1.0f64, 2.0, 3.0, -50.0].iter().map(|x| x.exp()).collect();
        let s: f64 = e.iter().sum();
        for (got, want) in v.iter().zip(e.iter().map(|x| x / s)) {
            assert!((*got as f64 - want).abs() < 1e-6, "{got} vs {want}");
        }

        let mut x = vec![1.0f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 14.0];
        let residual = vec![1.0f32; 8];
        let gamma = [1.0f32, 2.0, 1.0, 1.0];
        let beta = [0.0f32, 0.0, 0.5, 0.0];
        add_layer_norm(&mut x, &residual, &gamma, &beta, 1e-12);
        // Row one is 2,3,4,5: mean 3.5, variance 1.25.
        let sd = 1.25f32.sqrt();
        let want = [-1.5 / sd, 2.0 * -0.5 / sd, 0.5 / sd + 0.5, 1.5 / sd];
        for (got, want) in x[..4].iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
        // Row two is 11,11,11,15: mean 12, variance 3.
        let sd = 3f32.sqrt();
        let want = [-1.0 / sd, -2.0 / sd, -1.0 / sd + 0.5, 3.0 / sd];
        for (got, want) in x[4..].iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn attention_weights_values_by_query_key_similarity() {
        // Two positions, head size 2, rows laid out as [q | k | v].
        let qkv = vec![
            1.0f32, 0.0, 1.0, 0.0, 10.0, 0.0, // position 0
            0.0, 1.0, 0.0, 1.0, 0.0, 20.0, // position 1
        ];
        let mut out = vec![0f32; 4];
        let head = Head {
            stride: 6,
            q: 0,
            k: 2,
            v: 4,
            len: 2,
            size: 2,
        };
        attend(&qkv, head, &mut out);
        let scale = 1.0f64 / 2f64.sqrt();
        // Query 0 scores key 0 at 1*scale, key 1 at 0.
        let w0 = scale.exp() / (scale.exp() + 1.0);
        let want = [w0 * 10.0, (1.0 - w0) * 20.0, (1.0 - w0) * 10.0, w0 * 20.0];
        for (got, want) in out.iter().zip(want) {
            assert!((*got as f64 - want).abs() < 1e-4, "{got} vs {want}");
        }
    }
}
